"""Under trainer.strategy=fsdp, LitCausalLM.param_groups sees each rank's 1-D shard of every
weight (Lightning wraps with use_orig_params=True before configure_optimizers): the groups
must still follow the weights as built (matrices decay, vectors do not), and optim=muon is
refused before any work. Two gloo ranks on the CPU, FSDP's FULL_SHARD."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from hydra import compose, initialize_config_dir

from helpers.runs import subprocess_env, tiny_overrides
from packlm.config.schema import CONFIG_DIR, validate_config
from packlm.errors import ConfigError

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, warnings
    import torch, torch.distributed as dist, torch.multiprocessing as mp

    def groups(lit):
        names = {id(p): n for n, p in lit.model.named_parameters()}
        return {g["name"]: sorted(names[id(p)] for p in g["params"]) for g in lit.param_groups()}

    def run(rank, port, out):
        warnings.simplefilter("ignore")  # FSDP's notes on CPU runs
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        dist.init_process_group("gloo", rank=rank, world_size=2)
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from packlm.model.lit_module import LitCausalLM
        model = dict(vocab_size=61, context_length=16, n_layer=2, n_head=2, n_embd=16,
                     qk_norm=True, residual_scalars=True)
        torch.manual_seed(0)
        lit = LitCausalLM(model, {})
        before = groups(lit)
        FSDP(lit, use_orig_params=True, device_id=torch.device("cpu"))
        shard_dims = sorted({p.dim() for p in lit.model.parameters()})
        after = groups(lit)
        with open(f"{out}/{rank}.json", "w") as f:
            json.dump({"before": before, "after": after, "dims": shard_dims}, f)
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(run, args=(sys.argv[1], sys.argv[2]), nprocs=2)
    """
)


@pytest.mark.slow
def test_fsdp_shards_keep_their_param_groups(tmp_path):
    """Before: every weight was a 1-D shard, so every matrix fell into 'vectors' (no weight
    decay) and 'matrices' was empty."""
    script = tmp_path / "fsdp_groups.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), "29533", str(tmp_path)], env=subprocess_env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"{rank}.json").read_text())
        assert seen["dims"] == [1]  # FSDP's flat shards: what configure_optimizers sees
        assert seen["after"] == seen["before"]
        assert "blocks.0.attn.qkv.weight" in seen["after"]["matrices"]


def test_muon_under_fsdp_is_refused_before_any_work(tiny_corpus, tmp_path):
    overrides = tiny_overrides(
        tiny_corpus, tmp_path / "cache", "optim=muon", "trainer.strategy=fsdp"
    )
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=overrides)
    with pytest.raises(
        ConfigError, match=r"^optim\.algorithm=muon: not with trainer\.strategy=fsdp"
    ):
        validate_config(cfg)
    validate_config(compose_with(tiny_corpus, tmp_path, "optim=muon", "trainer.strategy=ddp"))


def compose_with(corpus, tmp_path, *extra):
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        return compose("config", overrides=tiny_overrides(corpus, tmp_path / "cache", *extra))
