"""A tiny inventory tool: the sample project warden's demo works on."""

from dataclasses import dataclass


@dataclass
class Item:
    name: str
    quantity: int
    price_cents: int


def total_value(items: list[Item]) -> int:
    """Value of the stock, in cents."""
    return sum(item.quantity * item.price_cents for item in items)


def low_stock(items: list[Item], threshold: int = 5) -> list[str]:
    """Names of the items that need reordering."""
    return [item.name for item in items if item.quantity < threshold]
