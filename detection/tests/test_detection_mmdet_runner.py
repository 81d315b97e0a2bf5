"""mmdetection's own Runner trains Faster R-CNN with the RaMBO classifier loss, from the config the
project ships (mmdet_configs/), and evaluates with mmdet's VOC metric: a few iterations on the
synthetic VOC-layout set, with RaMBO and with cross-entropy. Runs in the environment of
environments/mmdet/ (``make test-mmdet``); skipped elsewhere, an error when RAMBO_REQUIRE_MMDET=1."""

import math
import os
from pathlib import Path

import pytest
import torch

if os.environ.get("RAMBO_REQUIRE_MMDET") == "1":
    import mmdet.models  # noqa: F401
else:
    pytest.importorskip(
        "mmdet.models", reason="mmdetection with mmcv's compiled ops is not installed (make test-mmdet)"
    )
from mmengine.config import Config  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

import rambo.detection  # noqa: E402
from rambo.detection.synthetic import SYNTHETIC_CLASSES, generate  # noqa: E402

CONFIG = Path(rambo.detection.__file__).parent / "mmdet_configs" / "faster-rcnn_r50_fpn_rambo_voc0712.py"
CLASSES = tuple(SYNTHETIC_CLASSES)


def small_config(root: Path, loss: str, iterations: int = 4) -> Config:
    """The shipped config, shrunk: R-18 without pretrained weights, 96 px, the synthetic set."""
    cfg = Config.fromfile(str(CONFIG))
    cfg.model.backbone.update(depth=18, init_cfg=None)
    cfg.model.neck.in_channels = [64, 128, 256, 512]
    head = cfg.model.roi_head.bbox_head
    head.num_classes = len(CLASSES)
    if loss == "ce":
        head.loss_cls = dict(type="CrossEntropyLoss", use_sigmoid=False, loss_weight=1.0)
    else:
        head.loss_cls.num_classes = len(CLASSES)
    load = [dict(type="LoadImageFromFile"), dict(type="LoadAnnotations", with_bbox=True)]
    train_pipeline = [*load, dict(type="Resize", scale=(96, 96), keep_ratio=True), dict(type="PackDetInputs")]
    test_pipeline = [
        dict(type="LoadImageFromFile"),
        dict(type="Resize", scale=(96, 96), keep_ratio=True),
        dict(type="LoadAnnotations", with_bbox=True),
        dict(type="PackDetInputs", meta_keys=("img_id", "img_path", "ori_shape", "img_shape", "scale_factor")),
    ]

    def voc(split, pipeline, test):
        return dict(
            type="VOCDataset",
            data_root=f"{root}/",
            ann_file=f"VOC2007/ImageSets/Main/{split}.txt",
            data_prefix=dict(sub_data_root="VOC2007/"),
            metainfo=dict(classes=CLASSES),
            pipeline=pipeline,
            test_mode=test,
            filter_cfg=None if test else dict(filter_empty_gt=True, min_size=8, bbox_min_size=4),
        )

    loader = dict(num_workers=0, persistent_workers=False)
    cfg.train_dataloader = dict(
        batch_size=2,
        sampler=dict(type="DefaultSampler", shuffle=True),
        dataset=voc("trainval", train_pipeline, False),
        **loader,
    )
    cfg.val_dataloader = cfg.test_dataloader = dict(
        batch_size=1,
        drop_last=False,
        sampler=dict(type="DefaultSampler", shuffle=False),
        dataset=voc("test", test_pipeline, True),
        **loader,
    )
    cfg.val_evaluator = cfg.test_evaluator = dict(type="VOCMetric", metric="mAP", eval_mode="11points")
    cfg.train_cfg = dict(type="IterBasedTrainLoop", max_iters=iterations, val_interval=iterations)
    cfg.param_scheduler = []
    cfg.optim_wrapper = dict(type="OptimWrapper", optimizer=dict(type="SGD", lr=0.01, momentum=0.9, weight_decay=1e-4))
    cfg.default_hooks.logger = dict(type="LoggerHook", interval=1)
    cfg.default_hooks.checkpoint = dict(type="CheckpointHook", interval=10_000)
    cfg.work_dir = str(root / f"work_{loss}")
    cfg.randomness = dict(seed=0)
    return cfg


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmdet_voc")
    generate(root / "VOC2007", seed=0, num_trainval=8, num_test=4, image_size=96)
    return root


@pytest.mark.parametrize("loss", ["rambo", "ce"])
def test_mmdet_runner_trains_and_evaluates(data_root, loss, capsys):
    torch.set_num_threads(2)
    runner = Runner.from_cfg(small_config(data_root, loss))
    bbox_head = runner.model.roi_head.bbox_head
    assert type(bbox_head.loss_cls).__name__ == ("RaMBOClassifierLoss" if loss == "rambo" else "CrossEntropyLoss")
    assert runner.train_dataloader.dataset.metainfo["classes"] == CLASSES
    before = bbox_head.fc_cls.weight.detach().clone()
    runner.train()
    assert not torch.equal(bbox_head.fc_cls.weight.detach(), before)  # the classifier loss reached the classifier
    scalars = runner.message_hub.log_scalars
    assert math.isfinite(scalars["train/loss_cls"].current()) and math.isfinite(scalars["train/loss"].current())
    metrics = runner.test()
    assert 0.0 <= metrics["pascal_voc/mAP"] <= 1.0
    print(f"mmdet {loss}: loss_cls {scalars['train/loss_cls'].current():.4f}, test {metrics}")
