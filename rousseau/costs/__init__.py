"""What the models cost and the budgets that bound it: the price table (prices.py), and the
meter every model call passes through (meter.py)."""

from rousseau.costs.meter import (
    BUDGET_REPLY,
    SENDER_BUDGET_REPLY,
    Meter,
    Metered,
    Payer,
    paying,
    refusal,
)
from rousseau.costs.prices import Price, Prices

__all__ = [
    "BUDGET_REPLY",
    "SENDER_BUDGET_REPLY",
    "Meter",
    "Metered",
    "Payer",
    "Price",
    "Prices",
    "paying",
    "refusal",
]
