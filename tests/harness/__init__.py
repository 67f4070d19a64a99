"""What tests, compatibility runs, benchmarks and scripts share to run rowgate for real:
`rowgate serve` as a subprocess, its health probe, and signal handling for long runs."""
