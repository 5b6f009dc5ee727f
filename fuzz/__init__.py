"""Fuzzing of the code that parses bytes from the network: the record decoder (C, with
libFuzzer and sanitizers) and the whole-fetch decoder (Python, with atheris)."""
