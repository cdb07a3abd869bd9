"""Test configuration: fixtures live in small plugin modules under tests/support/."""

pytest_plugins = [
    "support.zookeeper",
    "support.spark",
    "support.objectstore",
    "support.sidecars",
    "support.required",
    "support.browser",
    "support.parallel",
]
