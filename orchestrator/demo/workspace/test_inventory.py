from inventory import Item, low_stock, total_value

ITEMS = [Item("bolt", 100, 5), Item("nut", 3, 2), Item("gear", 4, 250)]


def test_total_value() -> None:
    assert total_value(ITEMS) == 100 * 5 + 3 * 2 + 4 * 250


def test_low_stock() -> None:
    assert low_stock(ITEMS) == ["nut", "gear"]
