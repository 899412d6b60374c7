"""`CompiledViews`: a LightningModule's `model` run through torch.compile'd views, or as it
is (model.compile; `packlm.config.compile_choice` decides `auto` at a run's start).

The views are of the same module, not submodules, so the state_dict and the checkpoints do
not depend on them: `_run_model` (the whole model, for logits) and `_run_hidden` (its trunk,
for the chunked head on large CPU logits). A compile that fails at the first call falls back
to eager steps under auto, to the same result.
"""

from __future__ import annotations

import logging

import torch

from packlm.config.compile_choice import first_line
from packlm.errors import ConfigError

log = logging.getLogger(__name__)


class CompiledViews:
    """Mixin for a module with a `model` that has a `hidden` trunk (packlm's Transformer)."""

    model: torch.nn.Module
    runs_compiled: bool = False  # whether _run_model / _run_hidden are compiled views

    def use_compiled_views(self, on: bool, fallback: bool = False) -> None:
        """Run the model through torch.compile'd views (`on`) or as it is. The views are of
        the same module, not submodules (the same state_dict: checkpoints do not depend on
        it): the whole model for logits, its trunk for the chunked head (large CPU logits).

        The first call of each view is guarded: if it raises, the same call runs eagerly (a
        model error raises again there, as it is); if that works the compile was at fault:
        with `fallback` (model.compile=auto) one warning and eager steps from then on, else
        (model.compile=true) a ConfigError. The step then computes what an eager one does."""
        self.runs_compiled = on
        model, hidden = self.model, self.model.hidden
        if on:
            model = self._first_call_guard("_run_model", torch.compile(model), model, fallback)
            hidden = self._first_call_guard("_run_hidden", torch.compile(hidden), hidden, fallback)
        object.__setattr__(self, "_run_model", model)  # not a submodule: the same state_dict
        object.__setattr__(self, "_run_hidden", hidden)

    def _first_call_guard(self, name: str, compiled, eager, fallback: bool):
        """`compiled`, whose first call falls back to `eager` if it fails (use_compiled_views)."""

        def first_call(*args):
            try:
                out = compiled(*args)
            except Exception as e:  # torch's compile errors live in private modules
                out = eager(*args)  # the model's own errors raise here
                reason = first_line(e)
                if not fallback:
                    raise ConfigError(
                        f"model.compile=true: torch.compile failed ({reason}); eager steps "
                        "work: model.compile=auto falls back to them, false turns it off"
                    ) from None
                log.warning("model.compile=auto: compiling failed (%s); the run goes on "
                            "eagerly (model.compile=false silences this)", reason)  # fmt: skip
                self.use_compiled_views(False)
                return out
            if torch.is_grad_enabled():  # the training graph compiled too: no guard from now on
                object.__setattr__(self, name, compiled)
            return out

        return first_call
