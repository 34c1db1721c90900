"""Who answers a worker's calls (blockbatch/core/endpoint.py): hosts, key digests, what is said."""

from __future__ import annotations

from blockbatch.core.endpoint import (
    Endpoint,
    answered_text,
    answering,
    endpoint_host,
    endpoint_of,
    key_digest,
    mismatch_text,
)


def test_anthropics_own_api_has_no_host_and_others_keep_host_and_port() -> None:
    assert endpoint_host(None) is None
    assert endpoint_host("https://api.anthropic.com") is None
    assert endpoint_host("https://API.anthropic.com/") is None
    assert endpoint_host("http://127.0.0.1:8765") == "127.0.0.1:8765"
    assert endpoint_host("http://simulator:8765") == "simulator:8765"
    assert endpoint_host("https://gateway.example.com/anthropic") == "gateway.example.com"


def test_a_key_is_told_apart_by_a_short_digest_and_never_kept() -> None:
    key = "sk-ant-api03-secret-value"
    digest = key_digest(key)
    assert digest is not None and len(digest) == 12 and digest not in key
    assert key_digest("sk-ant-api03-other") != digest and key_digest(None) is None
    e = endpoint_of(None, simulated=False, api_key=key)
    assert key not in e.model_dump_json() and e.text() == "the Claude API"


def test_a_run_answered_by_the_simulator_says_so() -> None:
    sim = endpoint_of("http://127.0.0.1:8765", simulated=True, api_key="sim-local-key")
    assert sim.label() == "simulator 127.0.0.1:8765"
    assert answered_text([sim.label()]) == (
        "simulated: the simulator at 127.0.0.1:8765 answered, not Claude"
    )
    assert answered_text(["anthropic"]) == "the Claude API"
    assert answered_text([]) is None


def test_a_starter_set_for_claude_warns_about_workers_on_the_simulator() -> None:
    """The issue's case: the demo's worker has no key (the simulator's), the user's shell
    exported one and left ANTHROPIC_BASE_URL unset."""
    worker = endpoint_of("http://127.0.0.1:8765", simulated=True, api_key="sim-local-key")
    mine = endpoint_of(None, simulated=False, api_key="sk-ant-api03-mine")
    text = mismatch_text(mine, [worker], "blockbatch")
    assert text is not None
    assert "call the simulator at 127.0.0.1:8765 with a different API key" in text
    assert "not the Claude API" in text and "SIMULATED" in text and "sk-ant" not in text
    # The same settings, or no worker that said: nothing to warn about.
    assert mismatch_text(worker, [worker], "blockbatch") is None
    assert mismatch_text(mine, [], "blockbatch") is None
    # The same endpoint with another key is worth a word too (another account's limits).
    other_key = Endpoint(provider="anthropic", key_sha256=key_digest("sk-ant-other"))
    said = mismatch_text(mine, [other_key], "q")
    assert said is not None and "the Claude API with a different API key" in said
    assert "SIMULATED" not in said


def test_only_one_shared_provider_and_host_answers_a_run_whatever_the_keys() -> None:
    sim = Endpoint(provider="simulator", host="127.0.0.1:8765", key_sha256="a")
    same_sim = Endpoint(provider="simulator", host="127.0.0.1:8765", key_sha256="b")
    claude = Endpoint(provider="anthropic", key_sha256="a")
    assert answering([sim, same_sim]) == Endpoint(provider="simulator", host="127.0.0.1:8765")
    assert answering([claude]) == Endpoint(provider="anthropic")
    # Workers that call different endpoints, or none that said: no one endpoint answers.
    assert answering([sim, claude]) is None
    assert answering([]) is None
