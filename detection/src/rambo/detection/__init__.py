"""rambo.detection: Faster R-CNN with the RaMBO rank-based RoI classifier loss on Pascal VOC (paper Sec. 5.2)."""
