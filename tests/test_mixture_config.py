"""A mixture's config is checked before any work: each bad value is one ConfigError naming
its key (`packlm.config.mixture`)."""

from __future__ import annotations

import pytest

from packlm.config.data import DataConfig
from packlm.config.mixture import mixture_points, mixture_signature
from packlm.errors import ConfigError

TWO = ["data/web/*.jsonl.zst", "code/"]


def schedule(*points):
    return [{"step": s, "shares": shares} for s, shares in points]


BAD = {
    "shares not summing to 1": (
        dict(sources=[{"path": "web.txt", "share": 0.7}, {"path": "code.txt", "share": 0.2}]),
        r"data\.sources\[\*\]\.share: the shares sum to 0\.9, not 1 \(web 0\.7, code 0\.2\)",
    ),
    "a source without a share": (
        dict(sources=[{"path": "web.txt", "share": 1.0}, "code.txt"]),
        r"data\.sources\[1\]: no share",
    ),
    "share and weight": (
        dict(sources=[{"path": "web.txt", "share": 1.0, "weight": 2}]),
        r"data\.sources\[0\]: give share .* or weight .*, not both",
    ),
    "a share outside [0, 1]": (
        dict(sources=[{"path": "web.txt", "share": 1.5}]),
        r"data\.sources\[0\]\.share=1\.5",
    ),
    "a share on a validation source": (
        dict(
            sources=[{"path": "web.txt", "share": 1.0}],
            val_sources=[{"path": "val.txt", "share": 1.0}],
        ),
        r"data\.val_sources\[0\]\.share",
    ),
    "two sources of one name": (
        dict(sources=[{"path": "a/web.txt", "share": 0.5}, {"path": "b/web.txt", "share": 0.5}]),
        r"data\.sources: the names \['web'\] are used twice",
    ),
    "a schedule naming an unknown source": (
        dict(sources=TWO, mixture_schedule=schedule((0, {"web": 0.5, "math": 0.5}))),
        r"data\.mixture_schedule\[0\]\.shares: no training source is named 'math'",
    ),
    "a schedule not starting at 0": (
        dict(sources=TWO, mixture_schedule=schedule((5, {"web": 1}))),
        r"data\.mixture_schedule\[0\]\.step=5: the first point is at step 0",
    ),
    "steps out of order": (
        dict(
            sources=TWO,
            mixture_schedule=schedule((0, {"web": 1}), (9, {"code": 1}), (3, {"web": 1})),
        ),
        r"data\.mixture_schedule\[2\]\.step=3: steps must ascend",
    ),
    "a point not summing to 1": (
        dict(sources=TWO, mixture_schedule=schedule((0, {"web": 1}), (9, {"code": 0.5}))),
        r"data\.mixture_schedule\[1\]\.shares: the shares sum to 0\.5",
    ),
    "shares in two places": (
        dict(
            sources=[{"path": "web.txt", "share": 1.0}], mixture_schedule=schedule((0, {"web": 1}))
        ),
        r"data\.sources\[0\]\.share: data\.mixture_schedule gives the shares",
    ),
    "an unknown interpolation": (
        dict(
            sources=TWO, mixture_schedule=schedule((0, {"web": 1})), mixture_interpolation="cubic"
        ),
        r"data\.mixture_interpolation='cubic'",
    ),
    "a mixture and a curriculum": (
        dict(
            sources=TWO,
            mixture_schedule=schedule((0, {"web": 1})),
            curriculum=[{"window": 64, "until": 100}, {"window": 128}],
        ),
        r"data\.curriculum: not with a mixture",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_mixture_is_one_error_naming_its_key(case):
    values, message = BAD[case]
    with pytest.raises(ConfigError, match=message) as error:
        DataConfig.from_mapping(values)
    assert "\n" not in str(error.value)


def test_names_default_to_the_path_stem_or_a_globs_folder_and_a_schedule_fills_left_out_sources_with_0():
    cfg = DataConfig.from_mapping(
        dict(
            sources=[*TWO, {"path": "m.txt", "name": "math"}],
            mixture_schedule=schedule(
                (0, {"web": 0.7, "code": 0.2, "math": 0.1}), (900, {"math": 1.0})
            ),
        )
    )
    assert mixture_points(cfg) == [
        (0, {"web": 0.7, "code": 0.2, "math": 0.1}),
        (900, {"web": 0.0, "code": 0.0, "math": 1.0}),
    ]
    saved = {"sources": cfg.sources, "mixture_schedule": cfg.mixture_schedule}  # a checkpoint's
    assert mixture_signature(saved) == mixture_signature(cfg)
    assert mixture_signature(DataConfig.from_mapping({})) is None
