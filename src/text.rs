//! Small helpers on text shared by the modules that show or cut it.

/// The largest character boundary of `text` at or before byte `index` (`text.len()` for an index
/// past the end): where a cut to at most `index` bytes may go. (std's `str::floor_char_boundary`
/// is not stable yet.)
pub(crate) fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    let mut at = index;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_never_splits_a_character() {
        let text = "aé€😀";
        let boundaries: Vec<usize> = (0..=text.len() + 1).map(|i| floor_char_boundary(text, i)).collect();
        assert_eq!(boundaries, [0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10, 10]);
    }
}
