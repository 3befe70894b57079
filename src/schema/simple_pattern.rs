//! A direct matcher for the simple `pattern`s tool schemas mostly carry (`^ORD-[0-9]{6}$`,
//! `^[a-z_]+$`, `^\d{4}-\d{2}-\d{2}$`): a sequence of single-character atoms (a literal, `.`,
//! `\d`, `\w`, `\D`, `\W` or a bracket class), each with an optional quantifier, between optional
//! `^` and `$`.
//!
//! Every pattern is still compiled by `regress` at registration, which decides validity and
//! handles everything else; this matcher is built only for patterns it understands completely and
//! for which a greedy scan without backtracking decides a match exactly: each atom whose count
//! varies is followed either by the end of the pattern or by an atom that needs at least one
//! character none of which the varying atom accepts. (Giving characters back could then never
//! help: the next atom would still see a character of the varying atom's set.) Matching is on
//! code points, as regress's unicode mode (`u` flag) that the compiler uses; tests compare the two
//! on every pattern they can build from a set of pieces.
//!
//! An unanchored pattern is tried from every start, and a naive scan would go over the same run
//! again from each one (`[a-z]+@` on 100,000 `a`s: 5 billion steps). The search remembers, for each
//! unbounded atom (`*`, `+`, `{n,}`), the last run it scanned: such a scan stops only at a
//! character outside the atom's set (or the end), so from any position inside that run it stops at
//! the same place, found without scanning. That makes the search linear: where an atom starts is
//! a non-decreasing function of where the match starts (each piece's greedy end, `x` plus the
//! most characters of its set it may take, never goes back as `x` goes forward: a later `x` inside
//! the part taken from an earlier one reaches the same run's end or takes as many characters), so
//! each new scan of an atom starts past the end of its last one, and the scans of one atom cover
//! each character once. A start then costs the text pieces, the counted atoms (`{n}`, `{n,m}`:
//! up to `m` characters) and, for an unbounded atom whose set goes beyond ASCII, up to its
//! minimum count of characters; the total is the string's length times that.

/// Unbounded repetition (`*`, `+`, `{n,}`).
const MANY: u32 = u32::MAX;

/// A set of characters: a bitmap for ASCII, ranges (or their complement) above it.
#[derive(Debug, Clone)]
struct CharSet {
    ascii: [u64; 2],
    ranges: Vec<(u32, u32)>,
    /// The non-ASCII part is everything *outside* `ranges`.
    negated: bool,
}

impl CharSet {
    fn empty() -> Self {
        CharSet { ascii: [0; 2], ranges: Vec::new(), negated: false }
    }

    fn add(&mut self, lo: u32, hi: u32) {
        for c in lo..=hi.min(127) {
            self.ascii[(c / 64) as usize] |= 1 << (c % 64);
        }
        if hi >= 128 {
            self.ranges.push((lo.max(128), hi));
        }
    }

    fn digits() -> Self {
        let mut s = CharSet::empty();
        s.add(u32::from(b'0'), u32::from(b'9'));
        s
    }

    fn word() -> Self {
        let mut s = CharSet::digits();
        s.add(u32::from(b'A'), u32::from(b'Z'));
        s.add(u32::from(b'a'), u32::from(b'z'));
        s.add(u32::from(b'_'), u32::from(b'_'));
        s
    }

    fn complement(mut self) -> Self {
        self.ascii = [!self.ascii[0], !self.ascii[1]];
        self.negated = !self.negated;
        self
    }

    /// `.`: anything but the line terminators \n, \r, U+2028 and U+2029.
    fn dot() -> Self {
        let mut s = CharSet::empty();
        s.add(0x0A, 0x0A);
        s.add(0x0D, 0x0D);
        s.add(0x2028, 0x2029);
        s.complement()
    }

    #[inline]
    fn contains(&self, c: u32) -> bool {
        if c < 128 {
            self.ascii[(c / 64) as usize] >> (c % 64) & 1 == 1
        } else {
            self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != self.negated
        }
    }

    /// True when no character above ASCII is in the set. (A byte >= 0x80 then never matches:
    /// `contains` of such a byte value looks at the empty non-ASCII part.)
    #[inline]
    fn is_ascii_only(&self) -> bool {
        !self.negated && self.ranges.is_empty()
    }

    /// True only when no character is in both (conservative: false when unsure).
    fn disjoint(&self, other: &CharSet) -> bool {
        if self.ascii[0] & other.ascii[0] != 0 || self.ascii[1] & other.ascii[1] != 0 {
            return false;
        }
        match (self.negated, other.negated) {
            (false, false) => {
                self.ranges.iter().all(|&(a, b)| other.ranges.iter().all(|&(c, d)| b < c || d < a))
            }
            // Either side takes all but a few non-ASCII characters: overlap unless the other has none.
            (true, false) => other.ranges.is_empty(),
            (false, true) => self.ranges.is_empty(),
            (true, true) => false,
        }
    }
}

#[derive(Debug, Clone)]
struct Atom {
    set: CharSet,
    min: u32,
    max: u32,
    /// The one character of a literal atom.
    literal: Option<char>,
    /// An unbounded atom's place among the search's remembered runs ([`Run`]).
    slot: usize,
}

/// The part of the string the last scan of an unbounded atom went over: every character in
/// `from..to` is in its set, the one at `to` is not (or `to` is the end).
#[derive(Debug, Clone, Copy)]
struct Run {
    from: usize,
    to: usize,
}

impl Run {
    /// No scan yet (`from > to` contains no position).
    const NONE: Run = Run { from: 1, to: 0 };
}

/// The state of one search: the remembered runs and a count of the steps taken.
struct Search<'r> {
    runs: &'r mut [Run],
    /// Characters looked at, and one per piece: what the search costs, for tests.
    steps: u64,
}

/// What is matched in turn: runs of literal characters are compared as text.
#[derive(Debug)]
enum Piece {
    Text(Box<str>),
    Atom(Atom),
}

/// A compiled simple pattern; see the module doc.
#[derive(Debug)]
pub(crate) struct SimplePattern {
    start_anchor: bool,
    end_anchor: bool,
    pieces: Box<[Piece]>,
    /// How many atoms are unbounded (the runs a search remembers).
    unbounded: usize,
}

/// Remembered runs a search keeps on the stack; a pattern with more unbounded atoms allocates.
const STACK_RUNS: usize = 8;

/// Characters that `\` may escape to themselves in unicode mode (outside a class, `-` is not one).
fn syntax_char(c: char) -> bool {
    matches!(c, '^' | '$' | '\\' | '.' | '*' | '+' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '|' | '/')
}

impl SimplePattern {
    /// The matcher for `source`, or None when the pattern is not one this module handles exactly
    /// (regress then matches it).
    pub(crate) fn compile(source: &str) -> Option<SimplePattern> {
        let chars: Vec<char> = source.chars().collect();
        let mut i = 0;
        let start_anchor = chars.first() == Some(&'^');
        if start_anchor {
            i = 1;
        }
        let mut end = chars.len();
        let end_anchor = end > i && chars[end - 1] == '$' && !escaped_at(&chars, end - 1);
        if end_anchor {
            end -= 1;
        }
        let mut atoms: Vec<Atom> = Vec::new();
        while i < end {
            let (set, literal, next) = parse_atom(&chars[..end], i)?;
            i = next;
            let (min, max, next) = parse_quantifier(&chars[..end], i)?;
            i = next;
            atoms.push(Atom { set, min, max, literal, slot: 0 });
        }
        // Greedy must be exact: a varying atom is last or followed by a disjoint required atom.
        for pair in atoms.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if a.min != a.max && !(b.min >= 1 && a.set.disjoint(&b.set)) {
                return None;
            }
        }
        let mut pieces: Vec<Piece> = Vec::new();
        let mut unbounded = 0;
        for mut atom in atoms {
            if atom.max == MANY {
                atom.slot = unbounded;
                unbounded += 1;
            }
            match (atom.literal, atom.min, atom.max, pieces.last_mut()) {
                (Some(c), 1, 1, Some(Piece::Text(text))) => {
                    let mut joined = String::from(std::mem::take(text));
                    joined.push(c);
                    *text = joined.into_boxed_str();
                }
                (Some(c), 1, 1, _) => pieces.push(Piece::Text(c.to_string().into_boxed_str())),
                _ => pieces.push(Piece::Atom(atom)),
            }
        }
        Some(SimplePattern { start_anchor, end_anchor, pieces: pieces.into_boxed_slice(), unbounded })
    }

    /// True when the pattern matches somewhere in `s` (JSON Schema patterns are not anchored).
    pub(crate) fn is_match(&self, s: &str) -> bool {
        self.search(s).0
    }

    /// Whether the pattern matches somewhere in `s`, and the steps the search took.
    fn search(&self, s: &str) -> (bool, u64) {
        let mut stack = [Run::NONE; STACK_RUNS];
        let mut heap = Vec::new();
        // Anchored, there is one start: nothing to remember.
        let runs: &mut [Run] = match self.unbounded {
            _ if self.start_anchor => &mut [],
            n if n <= STACK_RUNS => &mut stack[..n],
            n => {
                heap.resize(n, Run::NONE);
                &mut heap
            }
        };
        let mut search = Search { runs, steps: 0 };
        if self.start_anchor {
            return (self.match_at(s, 0, &mut search), search.steps);
        }
        let mut pos = 0;
        loop {
            if self.match_at(s, pos, &mut search) {
                return (true, search.steps);
            }
            match s[pos..].chars().next() {
                Some(c) => pos += c.len_utf8(),
                None => return (false, search.steps),
            }
        }
    }

    #[inline]
    fn match_at(&self, s: &str, mut pos: usize, search: &mut Search<'_>) -> bool {
        let bytes = s.as_bytes();
        for piece in self.pieces.iter() {
            search.steps += 1;
            let atom = match piece {
                Piece::Text(text) => {
                    // Short literals inline: a memcmp call costs more than the compare.
                    let text = text.as_bytes();
                    match bytes.get(pos..pos + text.len()) {
                        Some(got) if got.iter().zip(text).all(|(a, b)| a == b) => {}
                        _ => return false,
                    }
                    search.steps += text.len() as u64;
                    pos += text.len();
                    continue;
                }
                Piece::Atom(atom) => atom,
            };
            // An unbounded atom starting inside the run it last scanned ends where that run ends.
            let run = if atom.max == MANY { search.runs.get_mut(atom.slot) } else { None };
            if let Some(run) = run.as_ref().filter(|r| r.from <= pos && pos <= r.to) {
                let n = if atom.set.is_ascii_only() {
                    // The run's characters are in the set: ASCII, one byte each.
                    run.to - pos
                } else {
                    // Counted only as far as the minimum needs.
                    let need = atom.min as usize;
                    search.steps += need as u64;
                    s[pos..run.to].chars().take(need).count()
                };
                if n < atom.min as usize {
                    return false;
                }
                pos = run.to;
                continue;
            }
            let from = pos;
            let mut n = 0;
            if atom.set.is_ascii_only() {
                // No character outside ASCII can match: test bytes, no decoding.
                while n < atom.max {
                    search.steps += 1;
                    match bytes.get(pos) {
                        Some(&b) if atom.set.contains(u32::from(b)) => {
                            pos += 1;
                            n += 1;
                        }
                        _ => break,
                    }
                }
            } else {
                while n < atom.max {
                    search.steps += 1;
                    let (c, len) = match bytes.get(pos) {
                        None => break,
                        Some(&b) if b < 0x80 => (u32::from(b), 1),
                        Some(_) => match s[pos..].chars().next() {
                            Some(c) => (u32::from(c), c.len_utf8()),
                            None => break,
                        },
                    };
                    if !atom.set.contains(c) {
                        break;
                    }
                    pos += len;
                    n += 1;
                }
            }
            if let Some(run) = run {
                *run = Run { from, to: pos };
            }
            if n < atom.min {
                return false;
            }
        }
        !self.end_anchor || pos == s.len()
    }
}

/// True when the character at `at` is preceded by an odd number of backslashes.
fn escaped_at(chars: &[char], at: usize) -> bool {
    chars[..at].iter().rev().take_while(|&&c| c == '\\').count() % 2 == 1
}

/// One atom at `i`: its set, its character when it is a literal (a plain character or an escaped
/// syntax character such as `\.`), and the index after it.
fn parse_atom(chars: &[char], i: usize) -> Option<(CharSet, Option<char>, usize)> {
    match chars[i] {
        '.' => Some((CharSet::dot(), None, i + 1)),
        '[' => parse_class(chars, i + 1).map(|(set, next)| (set, None, next)),
        '\\' => {
            let c = *chars.get(i + 1)?;
            let set = match c {
                'd' => CharSet::digits(),
                'D' => CharSet::digits().complement(),
                'w' => CharSet::word(),
                'W' => CharSet::word().complement(),
                c if syntax_char(c) => return Some((literal(c), Some(c), i + 2)),
                _ => return None,
            };
            Some((set, None, i + 2))
        }
        '^' | '$' | '*' | '+' | '?' | '(' | ')' | ']' | '{' | '}' | '|' => None,
        c => Some((literal(c), Some(c), i + 1)),
    }
}

fn literal(c: char) -> CharSet {
    let mut s = CharSet::empty();
    s.add(u32::from(c), u32::from(c));
    s
}

/// A bracket class whose body starts at `i` (after `[`).
fn parse_class(chars: &[char], mut i: usize) -> Option<(CharSet, usize)> {
    let negated = chars.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut set = CharSet::empty();
    let mut first = true;
    loop {
        let c = *chars.get(i)?;
        if c == ']' {
            // `[]` and `[^]` are unusual enough to leave to regress.
            if first {
                return None;
            }
            i += 1;
            break;
        }
        first = false;
        let (lo, next) = class_char(chars, i)?;
        match lo {
            ClassItem::Set(s) => {
                if chars.get(next) == Some(&'-') && chars.get(next + 1) != Some(&']') {
                    return None; // `\d-x`: a syntax error in unicode mode
                }
                set.ascii[0] |= s.ascii[0];
                set.ascii[1] |= s.ascii[1];
                if s.negated || !s.ranges.is_empty() {
                    return None; // only ASCII sets are merged (\d, \w)
                }
                i = next;
            }
            ClassItem::Char(lo) => {
                if chars.get(next) == Some(&'-') && chars.get(next + 1).is_some_and(|&c| c != ']') {
                    let (hi, after) = class_char(chars, next + 1)?;
                    let ClassItem::Char(hi) = hi else { return None };
                    if hi < lo {
                        return None;
                    }
                    set.add(lo, hi);
                    i = after;
                } else {
                    set.add(lo, lo);
                    i = next;
                }
            }
        }
    }
    Some((if negated { set.complement() } else { set }, i))
}

enum ClassItem {
    Char(u32),
    Set(CharSet),
}

fn class_char(chars: &[char], i: usize) -> Option<(ClassItem, usize)> {
    match chars[i] {
        '\\' => {
            let c = *chars.get(i + 1)?;
            let item = match c {
                'd' => ClassItem::Set(CharSet::digits()),
                'w' => ClassItem::Set(CharSet::word()),
                '-' => ClassItem::Char(u32::from('-')),
                c if syntax_char(c) => ClassItem::Char(u32::from(c)),
                _ => return None,
            };
            Some((item, i + 2))
        }
        // A nested `[` is literal in ECMA classes; keep it simple and leave it to regress.
        '[' => None,
        c => Some((ClassItem::Char(u32::from(c)), i + 1)),
    }
}

/// A quantifier at `i` (if any): min, max and the index after it. A lazy `?` suffix changes which
/// match is found, not whether one exists, so it is accepted.
fn parse_quantifier(chars: &[char], i: usize) -> Option<(u32, u32, usize)> {
    let (min, max, mut next) = match chars.get(i) {
        Some('?') => (0, 1, i + 1),
        Some('*') => (0, MANY, i + 1),
        Some('+') => (1, MANY, i + 1),
        Some('{') => {
            let close = i + chars[i..].iter().position(|&c| c == '}')?;
            let body: String = chars[i + 1..close].iter().collect();
            let (lo, hi) = match body.split_once(',') {
                None => {
                    let n = number(&body)?;
                    (n, n)
                }
                Some((lo, "")) => (number(lo)?, MANY),
                Some((lo, hi)) => (number(lo)?, number(hi)?),
            };
            if hi < lo {
                return None;
            }
            (lo, hi, close + 1)
        }
        _ => return Some((1, 1, i)),
    };
    if chars.get(next) == Some(&'?') {
        next += 1;
    }
    // `a**` and the like are errors; leave them to regress (which refused them already).
    if matches!(chars.get(next), Some('?' | '*' | '+' | '{')) {
        return None;
    }
    Some((min, max, next))
}

fn number(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > 6 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|&n| n < MANY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(pattern: &str, s: &str) -> (bool, bool) {
        let simple = SimplePattern::compile(pattern).expect("simple");
        let regex = regress::Regex::with_flags(pattern, "u").unwrap();
        (simple.is_match(s), regex.find(s).is_some())
    }

    #[test]
    fn agrees_with_regress_on_typical_patterns() {
        let cases: &[(&str, &[&str])] = &[
            ("^ORD-[0-9]{6}$", &["ORD-004217", "ORD-00421", "ORD-0042170", "xORD-004217", "ORD-00421a", ""]),
            ("^[a-z_]+$", &["snake_case", "Snake", "", "a", "a-b"]),
            (r"^\d{4}-\d{2}-\d{2}$", &["2026-11-30", "2026-1-30", "２０２６-11-30", "2026-11-300"]),
            ("^\\+?[0-9]{7,15}$", &["+8613800000000", "13800", "++8613800000000", "8613800000000000"]),
            ("[0-9]", &["abc", "ab1", "", "١"]),
            ("abc", &["xxabcxx", "ab", "ABC"]),
            ("^.{2,4}$", &["ab", "a\nb", "abcde", "日本語", "😀😀"]),
            (r"^[^\s]", &["x"]), // not simple: \s inside a class (checked below)
            ("^[A-Z][a-z]*$", &["Hello", "hello", "H", "HeLLo"]),
            (r"^\w+@\w+\.com$", &["a@b.com", "a@b.co", "@b.com"]),
            (r"^\W*$", &["", "!!", "a"]),
            ("^[^0-9]+[0-9]$", &["ab1", "1", "ab12", "é9"]),
            (r"^[\d.-]+$", &["1.5-2", "a"]),
            ("^日本{1,2}$", &["日本", "日本本", "日", "日本本本"]),
            (r"^\$\d+\.\d{2}$", &["$10.00", "10.00", "$1.0"]),
        ];
        for (pattern, inputs) in cases {
            let Some(simple) = SimplePattern::compile(pattern) else {
                assert_eq!(*pattern, r"^[^\s]", "unexpected fallback for {pattern}");
                continue;
            };
            let regex = regress::Regex::with_flags(pattern, "u").unwrap();
            for s in *inputs {
                assert_eq!(simple.is_match(s), regex.find(s).is_some(), "{pattern} on {s:?}");
            }
        }
        assert_eq!(both("^ORD-[0-9]{6}$", "ORD-004217"), (true, true));
    }

    #[test]
    fn an_unanchored_search_takes_steps_linear_in_the_string() {
        // Each start used to scan the run again: n * n / 2 steps, 200 million here.
        let n = 20_000;
        let cases = [
            ("[a-z]+@", "a".repeat(n)),
            ("A[A-Z]+@", "A".repeat(n)),
            ("@?[a-z]+@", "a".repeat(n)),
            (r"[0-9]*[a-z]{2,}\.", "a".repeat(n)),
            ("[^@]{3,}@", "日".repeat(n)),
            (r"\w+@\w+\.com", "a@".repeat(n / 2)),
            ("[a-z]+1[a-z]+@", "a1".repeat(n / 2)),
        ];
        for (pattern, s) in cases {
            let simple = SimplePattern::compile(pattern).expect("simple");
            let (found, steps) = simple.search(&s);
            assert!(!found, "{pattern}");
            assert!(steps <= 8 * n as u64, "{pattern}: {steps} steps for {n} characters");
            // A match at the end is still found (regress, itself quadratic here, on a short one).
            let regex = regress::Regex::with_flags(pattern, "u").unwrap();
            for tail in ["@", "a@b.com", "1a@", "aa."] {
                let short = format!("{}{tail}", &s[s.len() - 300..]);
                assert_eq!(simple.is_match(&short), regex.find(&short).is_some(), "{pattern} on ..{tail}");
            }
            assert!(simple.is_match(&format!("{s}@a@b.com1a@aa.")), "{pattern}");
        }
    }

    #[test]
    fn leaves_what_it_cannot_decide_greedily_to_regress() {
        for pattern in [
            "^[a-z]*a$",      // a varying atom followed by an overlapping one
            "^a*a",           // same
            "^.*x$",          // same
            "(ab)+",          // groups
            "a|b",            // alternation
            r"^\s+$",         // \s (Unicode white space)
            r"\bword\b",      // assertions
            r"^\p{L}+$",      // property escapes
            "[]",             // empty class
            "[^]",            // any
            r"^\u0041$",      // unicode escapes
            "^[a-z]+[0-9]*$", // followed by an atom that may be empty
            "^a?b?$",         // same
        ] {
            assert!(SimplePattern::compile(pattern).is_none(), "{pattern} should fall back");
        }
    }
}

#[cfg(test)]
mod differential {
    use super::SimplePattern;
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;

    const ATOMS: &[&str] = &[
        "a", "b", "x", "日", ".", r"\d", r"\w", r"\W", r"\D", "[ab]", "[^a]", "[^日]", "[0-9]", "[a-c_]",
        r"[\-x]", r"\.",
    ];
    const QUANTIFIERS: &[&str] = &["", "", "?", "*", "+", "{2}", "{1,3}", "{2,}", "+?"];

    fn pattern() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            proptest::collection::vec((0..ATOMS.len(), 0..QUANTIFIERS.len()), 0..5),
            any::<bool>(),
        )
            .prop_map(|(start, atoms, end)| {
                let mut p = String::new();
                if start {
                    p.push('^');
                }
                for (a, q) in atoms {
                    p.push_str(ATOMS[a]);
                    p.push_str(QUANTIFIERS[q]);
                }
                if end {
                    p.push('$');
                }
                p
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Whenever the simple matcher takes a pattern, it decides exactly as regress does.
        #[test]
        fn simple_matcher_agrees_with_regress(
            pattern in pattern(),
            inputs in proptest::collection::vec("[ab0x日\n_.-]{0,12}", 8),
        ) {
            // Only patterns regress accepts reach the matcher (the compiler asks regress first).
            let regex = regress::Regex::with_flags(&pattern, "u");
            prop_assume!(regex.is_ok());
            let regex = regex.unwrap();
            if let Some(simple) = SimplePattern::compile(&pattern) {
                for s in &inputs {
                    prop_assert_eq!(simple.is_match(s), regex.find(s).is_some(), "{} on {:?}", pattern, s);
                }
            }
        }
    }

    #[test]
    fn most_generated_patterns_take_the_fast_path() {
        // The differential test above is only worth something if the matcher is actually used.
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = pattern();
        let mut taken = 0;
        for _ in 0..500 {
            let p = strategy.new_tree(&mut runner).unwrap().current();
            taken += usize::from(SimplePattern::compile(&p).is_some());
        }
        assert!(taken > 200, "only {taken} of 500 generated patterns were simple");
    }
}
