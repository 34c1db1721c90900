"""What everything below the front doors needs to know about one run: :class:`RunContext`.

Loaded from Postgres by ``blockbatch.store.runs.run_context`` (cached per process: a run's schema and
options never change); the rules here are pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from blockbatch.core.answer import CallShape, call_shape
from blockbatch.core.planning import (
    BLOCK_WRAPPER_TOKENS,
    LEARNING_PACK_BLOCKS,
    RESULT_OVERHEAD_TOKENS,
    OutputRatios,
    Pack,
    PlanLimits,
    describe_pack,
    estimate_output_tokens,
    evidence_output_tokens,
    expected_thinking,
    plan_packs,
    price_line,
    thinking_allowance,
)
from blockbatch.core.policy import oversized_message
from blockbatch.core.prompt import fixed_prompt_tokens, strict_fits
from blockbatch.core.providers import CLAUDE_API, Route, provider_info, wire_model
from blockbatch.core.registry import ModelInfo, scaled_tokens
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import SchemaSpec


@dataclass(frozen=True)
class RunContext:
    """A run's options, schema and model, and the sizing rules that follow from them."""

    run_id: str
    document_id: str
    schema_id: str
    options: RunOptions
    spec: SchemaSpec
    model: ModelInfo

    def on_model(self, model: ModelInfo) -> RunContext:
        """The same run's context with its calls sent to ``model`` at that model's default
        effort (the quality probe's ``probe_model``): its shape, limits and prices follow."""
        if model.id == self.model.id:
            return self
        # The provider's name for the run's model is not this model's (a Bedrock id, a
        # Foundry deployment): the sender maps this one by the provider's rules.
        options = self.options.model_copy(
            update={"model": model.id, "effort": None, "provider_model": None}
        )
        return dataclasses.replace(self, options=options, model=model)

    @cached_property
    def route(self) -> Route:
        """Where the run's calls go: its provider, and its model as the provider knows it."""
        provider = self.options.provider
        if provider == CLAUDE_API.provider:
            return CLAUDE_API
        return Route(provider, wire_model(provider, self.model.id, self.options.provider_model))

    @cached_property
    def shape(self) -> CallShape:
        """How every call of the run asks for its answer: channel, thinking, effort."""
        model = provider_info(self.options.provider).shaped(self.model)
        return call_shape(model, self.options.effort, strict_fits=strict_fits(self.spec))

    @cached_property
    def fixed_prompt_tokens(self) -> int:
        """Input every call of the run carries (system prompt, tool or output format, fixed
        text), in the run model's tokens (the planner's estimate, scaled for its tokenizer);
        once."""
        return scaled_tokens(self.model, fixed_prompt_tokens(self.spec, self.shape.channel))

    def thinking_per_call(self, observed: float | None = None) -> int:
        """The thinking tokens one call of the run is expected to write: ``observed`` (the
        run's calls so far, per call: it wins, also on a run whose calls were not expected
        to think) or, where they think (``shape.thinks``), the planner's assumption for
        the run's effort (``blockbatch.core.planning.EXPECTED_THINKING_TOKENS``); else 0."""
        if not self.shape.thinks and not observed:
            return 0
        return expected_thinking(self.shape.effort, observed)

    @cached_property
    def cacheable_prefix_tokens(self) -> int:
        """The prompt prefix a call reads from the cache (0: too short to be cached)."""
        fixed = self.fixed_prompt_tokens
        return fixed if fixed >= self.model.min_cacheable_tokens else 0

    def plan_limits(self, thinking: float | None = None) -> PlanLimits:
        """Pack sizing limits for this run (planning and re-planned halves alike).

        ``thinking``: what the run's calls thought per call so far (``None``: the planner's
        assumption); every call's ``max_tokens`` holds it, with headroom, where they think.
        """
        opts = self.options
        return PlanLimits(
            context_window=self.model.context_window,
            model_max_output=self.model.max_output_tokens,
            fixed_prompt_tokens=self.fixed_prompt_tokens,
            output_budget=min(opts.output_budget, self.model.max_output_tokens),
            safety_margin=opts.safety_margin,
            hard_cap=opts.hard_cap,
            max_batch_size=self.spec.prompt_config.max_batch_size,
            pack_size=opts.pack_size,
            batching_enabled=opts.batching_enabled,
            tokenizer_scale=self.model.tokenizer_scale,
            thinking_tokens=(
                thinking_allowance(self.shape.effort, thinking)
                if self.shape.thinks or thinking
                else 0
            ),
            max_prompt_tokens=price_line(self.model),
        )

    def output_estimate(
        self, block_tokens: int, ratios: OutputRatios | None = None, block_type: str | None = None
    ) -> int:
        """Expected output tokens of one block, in the run model's tokens.

        The run's ``estimated_output_per_block`` when set. Otherwise the schema's estimate of
        the answer's shape (its fields, the block's length), times what the run's answers
        (``ratios``) say it really writes (they were counted by the run's model, so they
        carry its tokenizer), else scaled for the model's tokenizer; and never more than
        the schema's ``max_tokens_per_block`` (plus evidence's quotes, when asked), which
        bounds a block's share but is not the estimate: a flat 800 a block planned 25
        calls where 5 do.
        """
        if self.options.estimated_output_per_block:
            return self.options.estimated_output_per_block
        shape = self.answer_shape(block_tokens)
        if ratios is not None:
            shape = max(1, math.ceil(shape * ratios.of(block_type)))
        else:
            shape = scaled_tokens(self.model, shape)
        cap = self.spec.prompt_config.max_tokens_per_block
        if cap is not None:
            # The setting sizes the fields; evidence's quotes come on top of it.
            cap += scaled_tokens(self.model, evidence_output_tokens(self.spec, block_tokens))
        return min(shape, cap) if cap is not None else shape

    def answer_shape(self, block_tokens: int) -> int:
        """:func:`~core.planning.estimate_output_tokens` of a block of ``block_tokens`` under
        the run's schema, ``setting=False`` (the shape a run learns its answers against).

        Remembered per size: a run asks it for every block of every pack it plans and
        sends, and the schema, which the estimate walks field by field, never changes."""
        shapes = self._answer_shapes
        shape = shapes.get(block_tokens)
        if shape is None:
            shape = shapes[block_tokens] = estimate_output_tokens(
                self.spec, block_tokens, setting=False
            )
        return shape

    @cached_property
    def _answer_shapes(self) -> dict[int, int]:
        return {}

    def blocks_cost_usd(self, block_tokens: Sequence[int]) -> float:
        """What sending blocks of these sizes is estimated to cost, as the quote prices a
        block: its input (content and the JSON around it) and its expected answer, at the
        model's prices; the prompt they would share with other blocks is not counted."""
        model = self.model
        sent = sum(scaled_tokens(model, t + BLOCK_WRAPPER_TOKENS) for t in block_tokens)
        answers = sum(self.output_estimate(t) + RESULT_OVERHEAD_TOKENS for t in block_tokens)
        return (sent * model.price_input + answers * model.price_output) / 1_000_000

    def learns_output(self) -> bool:
        """Whether a plan without ``ratios`` starts with a learning pack (see
        :data:`~core.planning.LEARNING_PACK_BLOCKS`): sync mode, packs sized by estimate
        (no fixed ``pack_size``, batching on), and no set output per block."""
        o = self.options
        return (
            o.mode == "sync"
            and o.batching_enabled
            and o.pack_size is None
            and not o.estimated_output_per_block
        )

    def plan(
        self,
        block_tokens: Sequence[int],
        ratios: OutputRatios | None = None,
        block_types: Sequence[str] | None = None,
        *,
        learning: bool = False,
        cap: int | None = None,
    ) -> list[Pack]:
        """The run's packs over its blocks' token estimates, in block order.

        ``learning``: pack 0 is the first :data:`~core.planning.LEARNING_PACK_BLOCKS` blocks
        of the plan's first pack, sent alone; the rest is planned again from its answer.
        ``cap``: at most this many blocks a pack (the quality gate's pack size).
        """
        types: Sequence[str | None] = block_types or [None] * len(block_tokens)
        outputs = [
            self.output_estimate(t, ratios, k) for t, k in zip(block_tokens, types, strict=True)
        ]
        limits = self.plan_limits()
        if cap is not None:
            limits = dataclasses.replace(
                limits,
                hard_cap=min(limits.hard_cap, cap),
                pack_size=None if limits.pack_size is None else min(limits.pack_size, cap),
            )
        packs = plan_packs(block_tokens, outputs, limits)
        if not learning or len(packs) < 2 or len(packs[0].positions) <= LEARNING_PACK_BLOCKS:
            return packs
        first = range(LEARNING_PACK_BLOCKS)
        rest = plan_packs(
            block_tokens[LEARNING_PACK_BLOCKS:], outputs[LEARNING_PACK_BLOCKS:], limits
        )
        shifted = [
            dataclasses.replace(p, positions=tuple(i + LEARNING_PACK_BLOCKS for i in p.positions))
            for p in rest
        ]
        return [
            describe_pack(
                first, block_tokens[:LEARNING_PACK_BLOCKS], outputs[:LEARNING_PACK_BLOCKS], limits
            ),
            *shifted,
        ]

    def pack(
        self,
        block_tokens: Sequence[int],
        attempt: int = 1,
        observed: float | None = None,
        thinking: float | None = None,
    ) -> Pack:
        """The shape (``max_tokens``, input estimate) of one pack of these blocks.

        A first attempt asks for twice its output estimate, or, once the run has answers
        (``observed``: output written per estimated token), for what they say with some
        headroom; a later attempt (after a truncated answer, say) for the whole budget.
        Where the run's calls think, ``max_tokens`` also holds the thinking allowance
        (``thinking``: what its calls thought per call so far).
        """
        outputs = [self.output_estimate(t) for t in block_tokens]
        # Learned against the schema's shape of each answer (its fields, the block's
        # length), not a flat per-block setting that cannot tell a heading from a page.
        shape = [self.answer_shape(t) for t in block_tokens]
        return describe_pack(
            range(len(block_tokens)),
            block_tokens,
            outputs,
            self.plan_limits(thinking),
            generous=attempt > 1,
            observed=observed,
            shape=shape,
        )

    def too_large(self, pack: Pack, blocks: int) -> str | None:
        """Why a lone block cannot be sent at all (``None`` when it can)."""
        if blocks != 1 or not pack.oversized:
            return None
        return oversized_message(
            self.model.id, pack.est_input_tokens, pack.max_tokens, self.model.context_window
        )
