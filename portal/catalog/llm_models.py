"""Models people run on slices: weights as shipped and the shape that sizes their KV cache, and
the container RAM limit each needs. One source for the manifest page's advice and pre-flight's
RAM and context lints (portal/preflight/lints.py), so the page never recommends a limit that
pre-flight then flags.
"""

from __future__ import annotations

from dataclasses import dataclass

# The model server reads the weights through the container's memory on their way to the GPU:
# the limit must hold the model, plus this much for the server itself.
SERVER_RAM_MIB = 1024


@dataclass(frozen=True)
class KnownModel:
    """Weights as shipped (Q4 for Ollama tags) and the shape that sizes its KV cache."""

    weights_mib: int
    layers: int
    kv_heads: int
    head_dim: int

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


KNOWN_MODELS = {
    "llama3.2:3b": KnownModel(2048, 28, 8, 128),
    "llama3.1:8b": KnownModel(4920, 32, 8, 128),
    "qwen2.5:7b": KnownModel(4690, 28, 4, 128),
    "mistral:7b": KnownModel(4170, 32, 8, 128),
}


def recommended_ram_limit_mib(model_mib: int) -> int:
    """The least container RAM limit that loads a model of `model_mib`."""
    return model_mib + SERVER_RAM_MIB


def ram_limits_line() -> str:
    """The manifest page's advice, per known model, e.g. "llama3.1:8b 5944 MiB"."""
    return ", ".join(
        f"{name} {recommended_ram_limit_mib(m.weights_mib)} MiB" for name, m in KNOWN_MODELS.items()
    )
