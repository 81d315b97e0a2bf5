# Faster R-CNN R-50 FPN on Pascal VOC 07+12 with the RaMBO RoI classifier loss (paper Sec. 5.2),
# on mmdetection's own VOC recipe: 4 epochs of a 3x repeated dataset (= 12 epochs), lr x0.1 after
# 3 (= 9). Train with mmdetection's tools (in the environment of environments/mmdet/):
#     python tools/train.py <this file>       or       mmengine's Runner.from_cfg(Config.fromfile(...))
# The loss is registered by the plugin module named in custom_imports (pip install ./core ./detection).
_base_ = "mmdet::pascal_voc/faster-rcnn_r50_fpn_1x_voc0712.py"

custom_imports = dict(imports=["rambo.detection.mmdet_plugin"], allow_failed_imports=False)

model = dict(
    roi_head=dict(
        bbox_head=dict(
            # (1 - c) L_mAP + c L_AP-C, c = 1/3, score memory tau = 7 on L_mAP; margin 0.15, lambda 0.5
            loss_cls=dict(_delete_=True, type="RaMBOClassifierLoss", num_classes=20, margin=0.15, lam=0.5, tau=7),
        )
    ),
    # every detection is ranked by the trained object logits: keep low scores for the AP
    test_cfg=dict(rcnn=dict(score_thr=0.0)),
)

# The paper: batch 8, initial learning rate 0.1 (mmdetection's recipe: batch 16, lr 0.01).
train_dataloader = dict(batch_size=2)  # x 4 GPUs = 8
optim_wrapper = dict(optimizer=dict(lr=0.1))
auto_scale_lr = dict(enable=False, base_batch_size=8)
