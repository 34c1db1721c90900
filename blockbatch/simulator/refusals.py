"""Refusals the scenario switches on for whole requests, beyond rate limits and outages.

- ``errors.account_error``: every Messages request (and batch creation) is refused as the
  API refuses an account that may not spend (:func:`blockbatch.simulator.errors.account_error`;
  contract §6, "Spend limits"), until the scenario changes;
- ``errors.rate_ramp``: a 429 ``ramp_limit_exceeded`` with ``retry-after`` (contract §6,
  "Acceleration (ramp) limits"), drawn per request;
- ``errors.rate_504``: a 504 ``timeout_error`` (contract §6, "Error types"), drawn per request.

A refused request takes nothing from the rate-limit buckets.
"""

from __future__ import annotations

from blockbatch.simulator.errors import ApiError, account_error
from blockbatch.simulator.faults import Dice
from blockbatch.simulator.limits import RateLimiter, Reservation
from blockbatch.simulator.scenario import Errors


def refuse_by_scenario(
    errors: Errors, dice: Dice, limiter: RateLimiter, reservation: Reservation
) -> None:
    """Raise the refusal the scenario asks for this request, if any.

    Raises:
        ApiError: the account error, an injected ramp 429 or an injected 504.
    """
    if errors.account_error is not None:
        limiter.cancel(reservation)
        raise account_error(errors.account_error)
    if dice.chance(errors.rate_ramp, "rate_ramp"):
        limiter.cancel(reservation)
        raise limiter.ramp_refusal(errors.retry_after_s, fault="rate_ramp")
    if dice.chance(errors.rate_504, "rate_504"):
        raise ApiError(
            "timeout_error",
            "Request timed out before the model finished; use "
            "streaming or Message Batches for long requests.",
            fault="rate_504",
        )
