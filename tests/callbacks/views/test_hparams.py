"""HParams: the experiment declares its columns and domains; the run's row keeps its types."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, metadata

from helpers.runs import tiny_overrides
from packlm.callbacks.views.hparams import SHOWN, HParams
from packlm.config.schema import CONFIG_DIR, validate_config


@pytest.fixture
def config(tmp_path):
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=tiny_overrides(tmp_path, tmp_path / "cache"))
    return validate_config(cfg)


def written(tmp_path, callback: HParams) -> tuple[api_pb2.Experiment, dict]:
    """Run the callback into a real event file; the experiment and the session's values."""
    logger = TensorBoardLogger(str(tmp_path / "run"), name="tb", version="")
    callback.on_fit_start(SimpleNamespace(loggers=[logger]), None)
    logger.experiment.flush()
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    content = events.PluginTagToContent(metadata.PLUGIN_NAME)
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    session = metadata.parse_session_start_info_plugin_data(
        content[metadata.SESSION_START_INFO_TAG]
    )
    assert session.group_name == f"{tmp_path.name}/run"  # the run's name in the table
    return experiment, dict(session.hparams)


def test_the_experiment_declares_window_stride_and_the_metric_columns(config, tmp_path):
    experiment, values = written(tmp_path, HParams.of_run(config, SimpleNamespace(vocab_size=300)))
    infos = {i.name: i for i in experiment.hparam_infos}
    for name in ("data.window", "data.stride"):
        assert infos[name].type == api_pb2.DATA_TYPE_FLOAT64
        assert infos[name].domain_interval.min_value <= 1 and infos[name].differs
    packing = {v.string_value for v in infos["data.packing"].domain_discrete.values}
    assert packing == {"none", "document", "stream"}
    assert infos["data.random_offset"].type == api_pb2.DATA_TYPE_BOOL
    assert {i.name for i in experiment.hparam_infos if i.differs} == set(SHOWN)
    assert all(i.type != api_pb2.DATA_TYPE_UNSET for i in experiment.hparam_infos)
    assert [m.name.tag for m in experiment.metric_infos] == [
        "val/loss",
        "val/bpb",
        "tokens/supervised",
    ]

    assert values["data.window"].number_value == config.data.window == 32
    assert values["data.stride"].number_value == 16
    assert values["data.random_offset"].bool_value is True  # a bool, not 1.0
    assert values["data.pack_size"].string_value == "none"  # null, not 0.0
    assert values["tokenizer.vocab_size"].number_value == 300


def test_the_keys_a_sweep_varies_are_shown_first(config, tmp_path):
    varied = ("model.n_layer", "trainer.max_steps", "model.n_layer")  # max_steps: no hparam
    callback = HParams.of_run(config, SimpleNamespace(vocab_size=300), varied=varied)
    experiment, _ = written(tmp_path, callback)
    shown = {i.name for i in experiment.hparam_infos if i.differs}
    assert shown == {"model.n_layer", *SHOWN[:4]}
    columns = [i.name for i in experiment.hparam_infos]
    assert columns[:5] == ["model.n_layer", *SHOWN[:4]]  # the swept key is the first column
