"""LiSA: Linear Stochastic Attention (arXiv 2611.04216) as an OpenMMLab extension.

Importing the package imports nothing and registers nothing; each part imports what it runs:
the attention family (:mod:`.models.attention`) torch alone, inference from an exported file
(:mod:`.deploy.infer`, :mod:`.deploy.detect`) onnxruntime, numpy and OpenCV. The LiSA modules
enter the mm registries where a config asks for them, through :mod:`.registry`:

    custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
"""
