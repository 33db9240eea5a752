"""Data checks that name the bad file, its bad value and what would be valid (``tools/check_data.py``,
``tools/train.py --check-data``): the entry points in :mod:`.data_check`; the rules of valid data in
:mod:`.image_check`, :mod:`.label_map_check`, :mod:`.coco_annotation_check`, :mod:`.class_folder_check`,
:mod:`.head_classes` and :mod:`.eval_memory`; what they find as :mod:`.data_problems`; applied to a
config's datasets by :mod:`.dataset_loading` and :mod:`.split_check`.
"""
