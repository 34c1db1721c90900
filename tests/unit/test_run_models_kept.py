"""A run's models are kept with it as JSON (``runs.models``) and read back exactly
(blockbatch/core/run_model.py ``model_json`` / ``model_from_json``)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date

from blockbatch.core.registry import MODELS, configured_model
from blockbatch.core.run_model import model_from_json, model_json


def test_every_registry_model_reads_back_as_it_was_kept() -> None:
    for model in MODELS:
        kept = json.loads(json.dumps(model_json(model)))  # as Postgres hands it back
        assert model_from_json(kept) == model, model.id


def test_a_model_with_api_facts_and_configured_prices_reads_back_the_same() -> None:
    model = configured_model(
        "claude-x-6",
        {"input": 1.0, "output": 5.0},
        {"id": "claude-x-6", "max_tokens": 20_000, "max_input_tokens": 300_000},
    )
    model = replace(model, end_of_life=date(2027, 3, 1), thinking_types=frozenset({"adaptive"}))
    back = model_from_json(json.loads(json.dumps(model_json(model))))
    assert back == model and back.priced is False and back.end_of_life == date(2027, 3, 1)
