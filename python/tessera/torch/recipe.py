"""Roles and custom recipes of the tessera.torch training step: what one quantizer of the step is
for (QuantizerRole), how it quantizes (Fp8Role), and CustomRecipe, whose Python factory picks the
config of every role — the torch front end of the C++ `tessera::CustomRecipe`.

    recipe = CustomRecipe(lambda role: QuantizerConfig("rowwise" if role.name == "fc1"
                                                       else "tensor"))
    mlp = GroupedMLP(G, hidden, ffn, recipe=recipe)       # roles named "fc1" and "fc2"

factory(role) gets a QuantizerRole (module_type "grouped_linear", tensor_type "input", "weight"
or "grad_output", name: the layer's name, e.g. "fc1") and returns a QuantizerConfig or a dict
{"mode": ..., "element": ...}. The config goes through the C++ path (`_tessera.
_custom_recipe_config`: a C++ CustomRecipe whose factory calls this one, Recipe::config_for,
validate_config), so unknown modes, elements and keys are refused with the C++ messages. Then
the rules of the torch step (what its quantizers make and its GEMMs read):
- modes: "tensor" (per-tensor current scaling), "rowwise", "block1x128", "block128x128", each
  with the mode's defaults (compact FP32 scales, power-of-two for the block modes), and "mxfp8",
  "mxfp8_32x32" (E8M0 scales per 1x32 block / per 32x32 tile, compact, exponent rounded up;
  the 32x32 tiles are meant for weights, and any role may take either), and "nvfp4",
  "nvfp4_16x16" (E2M1 codes, E4M3 scales per 1x16 block / 16x16 tile, FP32 global amax) with
  the mode's defaults: a factory's config has only mode and element, so a custom NVFP4 role has
  neither the Hadamard transform nor stochastic rounding (the named recipe "nvfp4" has both);
- elements: "e4m3" for every FP8 role, "e5m2" for grad_output only — the GEMM takes E4M3 × E4M3
  and E5M2 × E4M3 with the gradient as A (dgrad dy · W, wgrad dy · x), so x and W stay E4M3;
  "e2m1" (the only one) for the NVFP4 modes;
- pairing: the three GEMMs (forward x · W, dgrad dy · W, wgrad dy · x) each meet two roles, and
  A and B of one GEMM must be of one scale family (formats/scaling_modes.h; the CUDA GEMM: the
  same mode, or two block modes): all "tensor", all "rowwise", block1x128 / block128x128 in
  any mix, or mxfp8 / mxfp8_32x32 / nvfp4 / nvfp4_16x16 in any mix (an NVFP4 copy meets an
  NVFP4 or an MXFP8 copy: the CUDA GEMM expands both to BF16, the CPU's dequantizes), e.g.
  MXFP8 forward tensors with NVFP4 gradients.
These rules hold on every device (the CPU GEMM, which dequantizes, would run more), so a recipe
that trains on the CPU also runs on CUDA; shape rules of one device stay with its GEMM (the CUDA
block dgrad needs out_features % 128 == 0 and refuses other shapes when it runs; the MXFP8 modes
need the CUDA GEMM's MXFP8 operands, which it refuses until it has them).

The factory is called once per role: a CustomRecipe keeps the resolved roles of each layer name,
so a step reads a cached tuple (GroupedLinear resolves its roles when it is made; under
torch.compile only the cache is read).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Dict, NamedTuple, Optional, Tuple, Union

from .. import _tessera as _C
from .delayed import ROLES  # the quantized tensors of one linear step, in state-row order

MODULE_TYPE = "grouped_linear"              # the module type of the roles the step asks for
# What the torch step runs (quantizers in tessera.torch.fp8, operands of the GEMM ops).
STEP_MODES = ("tensor", "rowwise", "block1x128", "block128x128", "mxfp8", "mxfp8_32x32", "nvfp4",
              "nvfp4_16x16")
# Families whose modes meet in any mix (the GEMM pairs an NVFP4 copy with an NVFP4 or MXFP8 one).
_MIXABLE_FAMILIES = {"mxfp8", "nvfp4"}
_FAMILY = {row["name"]: row["family"] for row in _C.scaling_mode_table}


class Fp8Role(NamedTuple):
    """How one tensor of the step (input, weight or grad_output) is quantized: the scaling mode
    and element the recipe gives the role, fp8_delayed's role state (scale, history, element,
    algorithm, margin: DelayedScaling.role_state; None for the stateless recipes), and NVFP4's
    options from the C++ recipe: the Hadamard transform of the columnwise copy, stochastic
    rounding and its Philox seed (the offset is the step's, tessera.torch.linear)."""
    mode: str
    element: str
    delayed: Optional[tuple] = None
    random_hadamard: bool = False
    stochastic_rounding: bool = False
    rng_seed: int = 0


@dataclass(frozen=True)
class QuantizerRole:
    """What a quantizer is for (the C++ QuantizerRole): module_type ("grouped_linear"),
    tensor_type ("input", "weight" or "grad_output") and name (the layer's name, "" if none)."""
    module_type: str
    tensor_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.module_type}/{self.tensor_type}/{self.name}"


@dataclass(frozen=True)
class QuantizerConfig:
    """The config a factory gives a role: mode ("tensor", "rowwise", "block1x128",
    "block128x128", "mxfp8", "mxfp8_32x32", "nvfp4", "nvfp4_16x16") and element ("e4m3", or
    "e5m2" for grad_output; "e2m1" for NVFP4); None: the mode's default (e4m3, e2m1 for NVFP4);
    current scaling with the mode's defaults."""
    mode: str
    element: Optional[str] = None


ConfigLike = Union[QuantizerConfig, dict]


def _as_dict(config, role: QuantizerRole, recipe: str) -> dict:
    if isinstance(config, QuantizerConfig):  # element None: the C++ mode's default
        return {k: v for k, v in dataclasses.asdict(config).items() if v is not None}
    if isinstance(config, dict):
        return config
    raise TypeError(f"recipe {recipe!r}, role {role}: the factory must return a "
                    f"tessera.torch.QuantizerConfig or a dict {{'mode': ..., 'element': ...}}, "
                    f"got {type(config).__name__}")


def _check_step_role(config: dict, role: QuantizerRole, recipe: str) -> Fp8Role:
    """The Fp8Role of a config the C++ path accepted, refused where the torch step cannot run
    it."""
    mode, element = config["mode"], config["element"]
    where = f"recipe {recipe!r}, role {role}"
    if mode not in STEP_MODES:
        raise ValueError(f"{where}: mode {mode!r} is not run by the tessera.torch step; expected "
                         f"one of {STEP_MODES}")
    if element == "e5m2" and role.tensor_type != "grad_output":
        raise ValueError(f"{where}: element 'e5m2' is taken for grad_output only; expected "
                         f"'e4m3' for {role.tensor_type} (the GEMM runs E4M3 x E4M3 and "
                         f"E5M2 x E4M3 with the gradient as A: x and W are B operands of the "
                         f"backward GEMMs)")
    return Fp8Role(mode, element)


def _check_pairing(roles: Tuple[Fp8Role, ...], layer: str, recipe: str) -> None:
    """The three GEMMs meet (input, weight), (grad_output, weight), (grad_output, input): one
    scale family for all three roles."""
    families = {_FAMILY[r.mode] for r in roles}
    if len(families) != 1 and not families <= _MIXABLE_FAMILIES:
        modes = ", ".join(f"{t} {r.mode}" for t, r in zip(ROLES, roles))
        raise ValueError(f"recipe {recipe!r}, layer {layer!r}: modes ({modes}) cannot meet in "
                         f"the step's GEMMs (forward x·W, dgrad dy·W, wgrad dy·x): A and B of a "
                         f"GEMM must be of one scale family — all 'tensor', all 'rowwise', "
                         f"'block1x128' / 'block128x128' in any mix, or 'mxfp8' / "
                         f"'mxfp8_32x32' / 'nvfp4' / 'nvfp4_16x16' in any mix")


class CustomRecipe:
    """A recipe whose factory decides every role's quantizer config (the C++ CustomRecipe).

    factory(QuantizerRole) -> QuantizerConfig | dict; name: the recipe's name in messages and
    reprs. Accepted wherever a recipe name is (grouped_linear, GroupedLinear, GroupedMLP). The
    factory is called once per role; `roles(layer)` gives the (input, weight, grad_output)
    Fp8Roles of a layer name, checked against what the torch step runs (module doc)."""

    def __init__(self, factory: Callable[[QuantizerRole], ConfigLike], name: str = "custom"):
        if not callable(factory):
            raise TypeError(f"factory: expected a callable role -> QuantizerConfig, got "
                            f"{type(factory).__name__}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name: expected a non-empty str, got {name!r}")
        self.factory = factory
        self.name = name
        self._roles: Dict[str, Tuple[Fp8Role, Fp8Role, Fp8Role]] = {}

    def config_for(self, tensor_type: str, module_type: str = MODULE_TYPE,
                   name: str = "") -> dict:
        """The C++ config of the role {module_type, tensor_type, name} (a dict: mode, element,
        usages, ...), through the C++ CustomRecipe; calls the factory (not cached)."""
        def call(mt: str, tt: str, n: str) -> dict:
            role = QuantizerRole(mt, tt, n)
            return _as_dict(self.factory(role), role, self.name)
        return _C._custom_recipe_config(call, self.name, module_type, tensor_type, name)

    def roles(self, layer: str = "") -> Tuple[Fp8Role, Fp8Role, Fp8Role]:
        """The (input, weight, grad_output) Fp8Roles of layer `layer`, resolved on first use
        (one factory call per role) and cached."""
        roles = self._roles.get(layer)
        if roles is None:
            roles = tuple(_check_step_role(self.config_for(t, MODULE_TYPE, layer),
                                           QuantizerRole(MODULE_TYPE, t, layer), self.name)
                          for t in ROLES)
            _check_pairing(roles, layer, self.name)
            self._roles[layer] = roles
        return roles

    def __repr__(self) -> str:
        return f"CustomRecipe({getattr(self.factory, '__name__', 'factory')}, name={self.name!r})"


__all__ = ["CustomRecipe", "Fp8Role", "QuantizerConfig", "QuantizerRole", "STEP_MODES"]
