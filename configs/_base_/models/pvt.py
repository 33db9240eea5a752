# The PVT v1 backbone (LiSAPVT) of every PVT config: Table 1 (ImageNet-1K), Table 3 (Semantic FPN)
# and Table 4 (Mask R-CNN), so the classifier's checkpoint holds exactly the dense backbone.
# `pvt_backbone` is the LiSA row; a row that changes the attention merges `pvt_attention[row]`
# into it. Every argument naming the attention is in this file.
# Linear attention in all four stages without spatial reduction (sr = 1) is FLatten's PVT design
# (FLatten-Transformer's flatten_pvt: attention types LLLL); LiSA takes the same places. The
# softmax baseline is PVT v1 itself: spatial reduction 8, 4, 2, 1. One dict serves every stage, so that a config
# inheriting the LiSA or FLatten row changes the attention with one dict (MMEngine merges a dict into a dict, not
# into the softmax row's list: there write `attn_cfgs=dict(_delete_=True, ...)`).
pvt_attention = dict(
    lisa=dict(attn_cfgs=dict(type='lisa')),  # LiSA's defaults are the paper's (T = 3, adaptive step weights)
    flatten=dict(attn_cfgs=dict(type='flatten')),
    softmax=dict(attn_cfgs=[dict(type='softmax', sr_ratio=r) for r in (8, 4, 2, 1)]),
)
pvt_backbone = dict(type='LiSAPVT', arch='tiny', pretrain_img_size=224, drop_path_rate=0.1, **pvt_attention['lisa'])
