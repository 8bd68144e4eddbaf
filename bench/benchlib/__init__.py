"""The benchmarks' code, along its seams (bench/wan.py, audit_scale.py and coexist_table.py are the commands):

- lab.py: network namespaces and veth pairs through a router namespace, the wanemu emulator (bench/wanemu.c)
  behind NFQUEUE, what the lab installs, the one host-wide setting it touches for a moment;
- goodput.py: `wan.py iperf`, TCP goodput of stock / TuneD / gpufleet ends over the emulated link;
- ansible_link.py: `wan.py ansible`, the audit over SSH behind the link, shipped ansible.cfg vs defaults;
- coexist.py: `wan.py coexist`, the tuned flow beside stock cubic traffic on the shared bottleneck;
- iperf3.py: what the measurements read from iperf3's JSON report (pure);
- tables.py: the one Markdown table printer and the number formats of its cells (pure);
- base.py: paths, running commands, medians, the results file's common fields.

Each measurement module has measure(args) (run it, print, write bench/results/), summarise(...) (the results
file's dict) and report(result) (the printed text, also from a results file).
"""
