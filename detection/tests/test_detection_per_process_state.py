"""What each process of a detection run checkpoints as its own (``rambo.harness.run.own_state``): the
RaMBO classifier loss's score memory and its margin generator, which are each process's own under
``loss.global_batch=false``, and the random states; never the weights (the same on every process).
That two processes resume with their own is tested with the library's loss under torchrun
(retrieval/tests/test_retrieval_per_process_resume.py)."""

from hydra import compose, initialize_config_dir

import rambo.detection
from rambo.detection.model import build_detector
from rambo.detection.synthetic import SYNTHETIC_CLASSES
from rambo.harness.run import own_state

CONFIG_DIR = str(rambo.detection.__path__[0] + "/configs")


def test_a_process_keeps_its_score_memory_and_margin_generator_as_its_own():
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "train", overrides=["experiment=tiny_rambo", "loss.global_batch=false", "loss.margin_mode=authors_random"]
        )
    model = build_detector(cfg.model, cfg.loss, len(SYNTHETIC_CLASSES))
    own = own_state({"model": model})
    assert set(own) == {"state", "rng"} and set(own["rng"]) >= {"python", "numpy", "torch"}
    assert set(own["state"]) == {"model"}
    assert sorted(own["state"]["model"]) == [
        "roi_heads.classifier_loss.map_memory._extra_state",
        "roi_heads.classifier_loss.margin_noise._extra_state",
    ]
