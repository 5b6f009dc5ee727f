"""What the benchmarks share: the machine, broker and code lines every result names
(:mod:`.machine`), writing results (:mod:`.report`), the paper's streams (:mod:`.streams`),
and the processes some benchmarks start (:mod:`.cpu_load`, :mod:`.sdk_member_process`,
:mod:`.autoscale_member`)."""
