# The BiFormer backbone (LiSABiFormer) of every BiFormer config: Table 2 (ImageNet-1K) and its ADE20K
# Semantic FPN rows, so the classifier's checkpoint holds exactly the dense backbone. A row merges
# `biformer_attention.<row>` into `biformer_backbone`; every argument naming the attention is in this file.
# BiFormer (Zhu et al., CVPR 2023; its repository rayleizhu/BiFormer): bi-level routing attention with
# 7 x 7 regions at 224 px (8 x 8 when segmenting 512 px crops), top-k 1, 4, 16 in stages 1-3, and global
# attention with LePE in stage 4. LiSA's placement (stages 1-3, no absolute position table) is this
# project's choice, explained in projects/lisa/models/backbones/biformer.py.
biformer_attention = dict(
    bra=dict(attn_cfgs=[dict(type='bra', n_win=7, topk=k) for k in (1, 4, 16)] + [dict(type='lepe', qkv_bias=False)]),
    bra_seg=dict(
        attn_cfgs=[dict(type='bra', n_win=8, topk=k) for k in (1, 4, 16)] + [dict(type='lepe', qkv_bias=False)]),
    lisa=dict(attn_cfgs=[dict(type='lisa', num_steps=3, pos_shape=None)] * 3 + [dict(type='lepe', qkv_bias=False)]),
)
biformer_backbone = dict(type='LiSABiFormer', pretrain_img_size=224)  # arch and drop path: each config's
