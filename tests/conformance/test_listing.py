"""docs/strategies.md lists every Java test mirrored here, one line each, and nothing else (see listing.py)."""

from tests.conformance import listing


def test_the_docs_list_exactly_the_java_tests_mirrored() -> None:
    current = listing.listed_block(listing.PAGE.read_text())
    assert current is not None, f"{listing.PAGE.name} lost its conformance list"
    assert current == listing.block(), (
        f"{listing.PAGE.name}'s list is out of date: run python -m tests.conformance.listing"
    )


def test_the_list_covers_each_class_the_issue_names() -> None:
    classes = {cls for cls, _, _ in listing.mirrored()}
    for java in (
        "ModularLoadManagerImplTest",
        "UniformLoadShedderTest",
        "OverloadShedderTest",
        "ThresholdShedderTest",
        "TransferShedderTest",
        "AvgShedderTest",
        "ModularLoadManagerStrategyTest",
        "BundleSplitterTaskTest",
    ):
        assert java in classes, java
