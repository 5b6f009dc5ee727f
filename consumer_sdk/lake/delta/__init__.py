"""Delta Lake: data files appended as one commit (:mod:`.files`) and the offsets read back
from a table's history (:mod:`.history`)."""
