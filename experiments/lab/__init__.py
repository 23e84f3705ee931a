"""The lab: specs -> runs -> summary -> checks -> figures -> report, for every study.

Records, resume and progress (`workdir`, `study`), launchers (`launch`), the
command line (`cli`), Markdown rendering (`render`) and the config blocks the
studies share (`models`). The lab never imports a study.
"""
