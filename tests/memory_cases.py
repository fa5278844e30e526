"""`scontrol` texts and the table of bad memory inputs, shared by tests/host/test_memory.py and
tests/faces/test_bad_inputs.py (the table of every bad input)."""

from __future__ import annotations

# Real `scontrol show partition` text from Slurm 22.05 (the local harness), plus variants.
PART_DEBUG = """\
PartitionName=debug
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   AllocNodes=ALL Default=YES QoS=N/A
   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO
   MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED
   Nodes=node[1-3]
   PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO
   OverTimeLimit=NONE PreemptMode=OFF
   State=UP TotalCPUs=12 TotalNodes=3 SelectTypeParameters=NONE
   JobDefaults=(null)
   DefMemPerCPU=1024 MaxMemPerNode=UNLIMITED
   TRES=cpu=12,mem=12G,node=3,billing=12
"""

PART_MIXED = """\
PartitionName=thinnodes
   AllowGroups=ALL Default=YES
   Nodes=c6601-c6640,c7[001-010]
   State=UP TotalCPUs=1440 TotalNodes=50 SelectTypeParameters=NONE
   JobDefaults=(null)
   DefMemPerCPU=5000 MaxMemPerNode=UNLIMITED

PartitionName=fatnode
   AllowGroups=ALL Default=NO
   Nodes=fat01
   State=UP TotalCPUs=64 TotalNodes=1
   JobDefaults=(null)
   DefMemPerNode=256000 MaxMemPerNode=UNLIMITED

PartitionName=gpu
   AllowGroups=ALL Default=NO
   Nodes=gpu-a100-[01-04]
   State=UP TotalCPUs=256 TotalNodes=4
   JobDefaults=(null)
   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED
"""

NODES = """\
NodeName=node1 Arch=x86_64 CoresPerSocket=1
   CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=3.20
   NodeAddr=127.0.0.1 NodeHostName=vm Port=16818 Version=22.05.8
   OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0
   RealMemory=4096 AllocMem=0 FreeMem=22857 Sockets=4 Boards=1
   CfgTRES=cpu=4,mem=4G,billing=4
   AllocTRES=

NodeName=gpu-a100-01 Arch=x86_64 CoresPerSocket=32
   CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.00
   RealMemory=512000 AllocMem=0 FreeMem=500000 MemSpecLimit=8000
   State=IDLE ThreadsPerCore=1 Reason=Not responding [slurm@2024-01-01T00:00:00]
"""


def env(**kw: str) -> dict:
    return {k: str(v) for k, v in kw.items()}


# (environment, keyword arguments of memory_per_task, a needle of the one-line message)
BAD = [
    (env(SLURM_MEM_PER_CPU="abc"), {}, "SLURM_MEM_PER_CPU='abc'"),
    (env(SLURM_MEM_PER_CPU="-5"), {}, "SLURM_MEM_PER_CPU='-5'"),
    (env(SLURM_MEM_PER_CPU="1e9"), {}, "SLURM_MEM_PER_CPU='1e9'"),
    (env(SLURM_MEM_PER_NODE="12Q"), {}, "SLURM_MEM_PER_NODE='12Q'"),
    (env(SLURM_MEM_PER_NODE="UNLIMITED"), {}, "SLURM_MEM_PER_NODE='UNLIMITED'"),
    (env(SLURM_MEM_PER_CPU="100", SLURM_CPUS_PER_TASK="0"), {}, "SLURM_CPUS_PER_TASK='0'"),
    (env(SLURM_MEM_PER_CPU="100", SLURM_CPUS_PER_TASK="two"), {}, "SLURM_CPUS_PER_TASK='two'"),
    (env(SLURM_MEM_PER_NODE="100", SLURM_TASKS_PER_NODE="4,(x2)"), {}, "SLURM_TASKS_PER_NODE='4,(x2)'"),
    (env(SLURM_MEM_PER_NODE="100", SLURM_TASKS_PER_NODE="3(x0)"), {}, "SLURM_TASKS_PER_NODE='3(x0)'"),
    (env(SLURM_MEM_PER_NODE="100", SLURM_NTASKS_PER_NODE="0"), {}, "SLURM_NTASKS_PER_NODE='0'"),
    (env(SLURM_MEM_PER_NODE="3"), {"tasks_on_node": 4}, "memory per task=0"),
    (env(SLURM_MEM_PER_CPU="100"), {"tasks_on_node": 0}, "tasks_on_node=0"),
    (env(SLURM_MEM_PER_CPU="100"), {"cpus_per_task": -1}, "cpus_per_task=-1"),
    ({}, {"partition_info": "PartitionName=p DefMemPerCPU=lots"}, "partition p DefMemPerCPU='lots'"),
    ({}, {"partition_info": "PartitionName=p DefMemPerCPU=__import__('os').getcwd()"}, "DefMemPerCPU="),
    ({}, {"partition_info": "hello world"}, "partition info="),
    ({}, {"partition_info": PART_MIXED, "partition": "nope"}, "partition='nope'"),
    ({}, {"partition_info": PART_DEBUG.replace("Default=YES", "Default=NO") + "\n" + PART_MIXED.replace(
        "Default=YES", "Default=NO")}, "partition=None"),
    ({}, {"node_info": "NodeName=n1 CPUTot=0 RealMemory=4096"}, "NodeName=n1 CPUTot='0'"),
    ({}, {"node_info": "NodeName=n1 CPUTot=4"}, "NodeName=n1 RealMemory=None"),
    ({}, {"node_info": "NodeName=n1 CPUTot=4 RealMemory=0"}, "NodeName=n1 RealMemory='0'"),
    ({}, {"node_info": "n1 four 4096"}, "node info: NodeName=n1 CPUs='four'"),
    ({}, {}, "memory information=None"),
]
