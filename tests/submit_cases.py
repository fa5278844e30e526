"""`scontrol show partition -o` and `scontrol show node -o` texts, shared by tests/plan/test_submit_checks.py,
tests/host/test_before_submit.py and tests/faces/test_submit.py (submit's checks before submitting)."""

from __future__ import annotations

# `scontrol show partition -o` and `scontrol show node -o` as Slurm 22.05 prints them (the local
# harness's cluster: 3 nodes x 4 CPUs), plus a GPU partition with MaxNodes and MaxCPUsPerNode
PARTITIONS = (
    "PartitionName=debug AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A "
    "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED "
    "MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=node[1-3] PriorityJobFactor=1 "
    "PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP "
    "TotalCPUs=12 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerCPU=1024 "
    "MaxMemPerNode=UNLIMITED TRES=cpu=12,mem=12G,node=3,billing=12\n"
    "PartitionName=gpu AllowGroups=ALL Default=NO MaxNodes=2 MaxTime=1-00:00:00 MaxCPUsPerNode=32 "
    "Nodes=gpu[01-04] State=UP TotalCPUs=256 TotalNodes=4 TRES=cpu=256,mem=2000G,node=4,gres/gpu=16\n"
)
NODES = (
    "NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=0.31 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=vm Port=16818 "
    "Version=22.05.8 OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC RealMemory=4096 AllocMem=0 FreeMem=2000 Sockets=4 "
    "Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug "
    "CfgTRES=cpu=4,mem=4G,billing=4 AllocTRES=\n"
    "NodeName=node2 CPUEfctv=4 CPUTot=4 Gres=(null) Partitions=debug State=IDLE\n"
    "NodeName=node3 CPUEfctv=4 CPUTot=4 Gres=(null) Partitions=debug State=IDLE\n"
    "NodeName=gpu01 CPUEfctv=64 CPUTot=64 Gres=gpu:a100:4(S:0-1) Partitions=gpu,debug2 State=IDLE\n"
    "NodeName=gpu02 CPUEfctv=62 CPUTot=64 Gres=gpu:a100:2(S:0),gpu:v100:2 Partitions=gpu State=MIXED\n"
)
