"""`python -m packlm.trace <run dir | checkpoint> step=N [rank=R] [--json]`: what a step trained on.

The epoch plan is a pure function of (store, data config, seed, epoch) (DESIGN.md
"Provenance"), so any optimizer step maps back to its rows and their document pieces from the
run's saved config alone, without replaying training or anything logged during it:

1. step N -> global batches: a step is `trainer.accumulate_grad_batches` (A) consecutive
   global batches of one epoch; an epoch of n global batches has ceil(n / A) steps (Lightning
   steps on a short last cycle), n cut to `trainer.limit_train_batches` when set.
2. (epoch, global batch b) -> samples: the sampler's segments (`PlanSampler.segments`: the
   curriculum's phases, counted exactly), positions base .. base + w*B of the phase's plan;
   slot i of the global batch is rank i % w's row i // w.
3. samples -> pieces (`EpochPlan.pieces`): store document, token span in the document, its
   source and record (the store's `doc_ids`), the text's first and last characters, the
   targets it gives under the label rule of `packlm.batch`, and the window's place in its
   sequence (offset, stride, window index).

Byte spans: the store keeps no byte offsets of documents in their source files (only
`doc_offsets`, token offsets, and `doc_ids`); the byte span given is inside the document's
UTF-8 text, which is the source file's span only for a whole-file document read unchanged.

Epochs are walked from the run's start, so a run resumed with another rank count (elastic
resume) is traced as if it had kept the configured one.

data.skip_steps and data.skip_documents of the run's config (`packlm.data.skip`) are applied
as training applied them: step N is the step the run logged as N, and its `plan_step` (the
number data.skip_steps takes) passes over the left-out ones; a piece of a skipped document
says so and gives no target.
"""

from packlm.commands.trace.cli import main, render
from packlm.commands.trace.run import tracer_of
from packlm.commands.trace.tracer import Schedule, Tracer
from packlm.data.store.sources.document import parse_doc_id

__all__ = ["Schedule", "Tracer", "main", "parse_doc_id", "render", "tracer_of"]
