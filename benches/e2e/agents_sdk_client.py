"""The OpenAI Agents SDK client of the end-to-end benchmark.

scripts/bench.sh installs `openai-agents` into a temporary venv and runs:

    python agents_sdk_client.py BASE_URL ROUNDS

An Agent with one function tool `record_reading` (the 6-property schema of
benches/e2e/tool_schema.json, built by the SDK from the typed signature; strict JSON schema, so the
SDK validates each call's arguments with pydantic), the Chat Completions model against the mock
(streamed: Runner.run_streamed), tracing off (nothing leaves the machine), max_turns raised to
ROUNDS + 5. Prints one JSON line; exits 1 unless exactly 3 * ROUNDS tool calls ran and the final
answer arrived.
"""

import asyncio
import json
import sys
from typing import Literal

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

EXECUTED = 0


@function_tool(strict_mode=True)
def record_reading(
    station: str, day: str, seq: int, unit: Literal["celsius", "fahrenheit"], verified: bool, note: str
) -> str:
    """Records one station reading.

    Args:
        station: station code
        day: ISO date
        seq: sequence number
        unit: the unit
        verified: whether it was verified
        note: a note
    """
    global EXECUTED
    EXECUTED += 1
    return json.dumps({"recorded": True, "seq": seq})


async def main(base_url: str, rounds: int) -> int:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="sk-bench-not-a-key", max_retries=0)
    model = OpenAIChatCompletionsModel(model=f"bench-r{rounds}", openai_client=client)
    agent = Agent(
        name="bench",
        instructions="Record every reading the stations send.",
        model=model,
        tools=[record_reading],
        model_settings=ModelSettings(parallel_tool_calls=True),
    )
    result = Runner.run_streamed(agent, "Record every reading the stations send.", max_turns=rounds + 5)
    async for _event in result.stream_events():
        pass
    text = result.final_output or ""
    ok = EXECUTED == 3 * rounds and text.startswith("All ")
    print(json.dumps({"client": "openai-agents", "rounds": rounds, "tool_calls": EXECUTED, "final_text": text}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], int(sys.argv[2]))))
