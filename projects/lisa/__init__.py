"""LiSA: Linear Stochastic Attention (arXiv 2611.04216) as an OpenMMLab extension.

Importing the package, or any part of it, registers nothing and imports no OpenMMLab library:
the attention family (:mod:`.models.attention`) needs torch alone, inference from an exported
file (:mod:`.deploy.infer`, :mod:`.deploy.detect`) onnxruntime, numpy and OpenCV. The LiSA
modules enter the mm registries where a config asks for them, through :mod:`.registry`:

    custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
"""
