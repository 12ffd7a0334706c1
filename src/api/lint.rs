//! Checks of a `CapacityBenchmark` before any traffic (filled in by the lint work).
