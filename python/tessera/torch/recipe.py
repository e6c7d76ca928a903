"""Recipes of the tessera.torch training step and their text form: what the compiled step op
(torch.ops.tessera.linear_fwd, ...) is told. Every rule — which modes exist, which roles pair in a
GEMM, which elements a role takes, token alignments, scale shapes — lives in C++
(tessera/quantize/recipe.h, formats/scaling_modes.h); this module only spells recipes as text.

    recipe names   RECIPES, the C++ recipe table ("fp32", "bf16", "fp8_rowwise", "fp8_current",
                   "fp8_delayed", "fp8_block", "mxfp8", "nvfp4"; FP8 ones with ":e4m3" /
                   ":e5m2" / ":hybrid"). "fp8_current" alone means E4M3 everywhere
                   ("fp8_current:e4m3"), tessera.torch's long-standing default.
    DelayedScaling TE's recipe with its options (tessera.torch.delayed)
    CustomRecipe   factory(QuantizerRole) -> QuantizerConfig per role:

    recipe = CustomRecipe(lambda role: QuantizerConfig("rowwise" if role.name == "fc1"
                                                       else "tensor"))
    mlp = GroupedMLP(G, hidden, ffn, recipe=recipe)       # roles named "fc1" and "fc2"

factory(role) gets a QuantizerRole (module_type "grouped_linear", tensor_type "input", "weight"
or "grad_output", name: the layer's name, e.g. "fc1") and returns a QuantizerConfig or a dict
{"mode": ..., "element": ...}. The config goes through the C++ path (a C++ CustomRecipe whose
factory calls this one, Recipe::config_for, validate_config, then the step's own check of the
three roles: make_linear_spec), so every refusal carries the C++ message. A factory's config has
only mode and element (each mode's defaults otherwise: a custom NVFP4 role has neither the
Hadamard transform nor stochastic rounding). The factory is called once per role and layer name.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple, Union

from .. import _tessera as _C
from .delayed import DelayedScaling

MODULE_TYPE = "grouped_linear"   # the module type of the roles the step asks for
ROLES = ("input", "weight", "grad_output")
# Every recipe of the C++ table.
RECIPES = tuple(row["name"] for row in _C.recipe_table)
# tessera.torch's spelling of a built-in name → the C++ recipe it runs.
_ALIASES = {"fp8_current": "fp8_current:e4m3"}


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
    """The config a factory gives a role: a scaling mode of the C++ table ("tensor", "rowwise",
    "block1x128", "block128x128", "mxfp8", "mxfp8_32x32", "nvfp4", "nvfp4_16x16") and an element
    ("e4m3", "e5m2", "e2m1"; None: the mode's default)."""
    mode: str
    element: Optional[str] = None


ConfigLike = Union[QuantizerConfig, dict]


def _as_dict(config, role: QuantizerRole, recipe: str) -> dict:
    if isinstance(config, QuantizerConfig):  # element None: the C++ mode's default
        return {k: v for k, v in dataclasses.asdict(config).items() if v is not None}
    if isinstance(config, dict):
        return config
    raise _C.ArgumentTypeError(
        f"tessera dtype mismatch: recipe {recipe!r}, role {role}: the factory must return a "
        f"tessera.torch.QuantizerConfig or a dict {{'mode': ..., 'element': ...}}, got "
        f"{type(config).__name__}")


class CustomRecipe:
    """A recipe whose factory decides every role's quantizer config (the C++ CustomRecipe).

    factory(QuantizerRole) -> QuantizerConfig | dict; name: the recipe's name in messages and
    reprs. Accepted wherever a recipe name is (grouped_linear, GroupedLinear, GroupedMLP)."""

    def __init__(self, factory: Callable[[QuantizerRole], ConfigLike], name: str = "custom"):
        if not callable(factory):
            raise _C.ArgumentTypeError(f"tessera dtype mismatch: factory: expected a callable "
                                       f"role -> QuantizerConfig, got {type(factory).__name__}")
        if not isinstance(name, str) or not name or ";" in name:
            raise _C.InvalidArgumentError(f"tessera invalid argument: name: expected a "
                                          f"non-empty str without ';', got {name!r}")
        self.factory = factory
        self.name = name
        self._specs: Dict[str, str] = {}

    def config_for(self, tensor_type: str, module_type: str = MODULE_TYPE,
                   name: str = "") -> dict:
        """The C++ config of the role {module_type, tensor_type, name} (a dict: mode, element,
        usages, ...), through the C++ CustomRecipe; calls the factory (not cached)."""
        def call(mt: str, tt: str, n: str) -> dict:
            role = QuantizerRole(mt, tt, n)
            return _as_dict(self.factory(role), role, self.name)
        return _C._custom_recipe_config(call, self.name, module_type, tensor_type, name)

    def spec(self, layer: str = "") -> str:
        """The recipe's text form for layer `layer` (the factory runs once per role, here, and
        the C++ step checks the three roles together)."""
        spec = self._specs.get(layer)
        if spec is None:
            parts = [f"custom:{self.name}"]
            for t in ROLES:
                c = self.config_for(t, MODULE_TYPE, layer)
                parts.append(f"{t}={c['mode']}/{c['element']}")
            spec = ";".join(parts)
            _C._check_recipe_spec(spec, layer)
            self._specs[layer] = spec
        return spec

    def __repr__(self) -> str:
        return f"CustomRecipe({getattr(self.factory, '__name__', 'factory')}, name={self.name!r})"

    def __getstate__(self):  # the resolved texts are a cache, not state
        return {"factory": self.factory, "name": self.name}

    def __setstate__(self, state):
        self.__init__(state["factory"], state["name"])


def base_name(recipe: str) -> str:
    """A recipe text's built-in name: the text before its options (';') and its format (':'),
    e.g. "fp8_block" of "fp8_block:e4m3", "mxfp8" of "mxfp8;weight_tiles=1"."""
    return recipe.split(";")[0].split(":")[0]


def resolve(recipe) -> Tuple[object, Optional[DelayedScaling]]:
    """(recipe, DelayedScaling or None) of a recipe argument: a CustomRecipe as it is, a
    DelayedScaling (or an "fp8_delayed[:format]" name, its default options), or a name of
    RECIPES. Raises tessera.InvalidArgumentError naming the accepted values."""
    if isinstance(recipe, (CustomRecipe, DelayedScaling)):
        return recipe, recipe if isinstance(recipe, DelayedScaling) else None
    if isinstance(recipe, str):
        base, _, fmt = recipe.partition(":")
        if base == "fp8_delayed":
            d = DelayedScaling(fp8_format=fmt or "hybrid")
            return d, d
        if base_name(recipe) in RECIPES:  # options after ';' (e.g. "mxfp8;weight_tiles=1")
            _C._check_recipe_spec(recipe_spec(recipe), "")
            return recipe, None
    raise _C.InvalidArgumentError(
        f"tessera invalid argument: recipe: {recipe!r} is not supported by tessera.torch; "
        f"expected one of {RECIPES} (FP8 ones optionally with :e4m3 / :e5m2 / :hybrid; "
        f"mxfp8 with ;weight_tiles=1 for 32x32 weight tiles), a DelayedScaling or a "
        f"CustomRecipe")


def recipe_spec(recipe, layer: str = "") -> str:
    """The text form (C++ parse_recipe_spec) of a resolved recipe for layer `layer`."""
    if isinstance(recipe, CustomRecipe):
        return recipe.spec(layer)
    if isinstance(recipe, DelayedScaling):
        return recipe.spec()
    name, sep, options = recipe.partition(";")
    return _ALIASES.get(name, name) + sep + options


__all__ = ["CustomRecipe", "QuantizerConfig", "QuantizerRole", "RECIPES", "recipe_spec",
           "resolve"]
