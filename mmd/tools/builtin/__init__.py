"""The built-in tools: plain Tool objects, registered like declared and MCP tools.

``FILE_TOOLS`` and ``SKILL_TOOLS`` map each tool's name to its (stateless) instance.
"""

from mmd.tools.builtin.files import EditFile, ReadFile, WriteFile
from mmd.tools.builtin.search import Grep, ListFiles
from mmd.tools.builtin.skill import ReadSkill

FILE_TOOLS = {t.name: t for t in (ReadFile(), WriteFile(), EditFile(), ListFiles(), Grep())}
SKILL_TOOLS = {t.name: t for t in (ReadSkill(),)}

__all__ = ["FILE_TOOLS", "SKILL_TOOLS", "EditFile", "Grep", "ListFiles", "ReadFile", "ReadSkill", "WriteFile"]
