"""Developer tooling kept off the product path: the local stack, the demo, synthetic data."""
