#!/bin/sh
# Round kb48 (helper a): the large-scale pretraining frameworks' failure messages, with pysweep.py.
# Usage: tools/format-sweep/kb48a-pretraining.sh FAULTLINE KB OUTDIR MIRRORS
# MIRRORS holds a git mirror of each repository as MIRRORS/<owner>+<name>/repo.
FL=${1:-faultline}; KB=${2:-kb}; OUT=${3:-.}; M=${4:?MIRRORS: the directory of git mirrors}
TOPIC='distributed|rank|world.?size|process group|node|checkpoint|resum|load|sav|shard|state.?dict|out of memory|OOM|overflow|loss.?scal|nan|inf\b|timeout|timed out|nccl|barrier|pipeline|tensor.?parallel|parallel|mismatch|device|cuda|gpu|launch|port|host|memory|folder|file|path|exist|found|latest|symlink|upload|download|object.?store|fsdp|zero|gemini|sharded|consolidat|reshard|topolog|mesh|stage|microbatch|dataloader|data.?loader|worker|stream'
S="python3 tools/format-sweep/pysweep.py --faultline $FL --kb $KB"
$S --topic "$TOPIC" --git $M/hpcaitech+ColossalAI/repo --tag v0.3.3 --tag v0.4.0 --tag v0.5.1 \
   --path colossalai/booster --path colossalai/checkpoint_io --path colossalai/zero --path colossalai/cli \
   --path colossalai/initialize.py --path colossalai/cluster --path colossalai/pipeline/schedule \
   --path colossalai/utils --path colossalai/accelerator --path colossalai/moe --out $OUT/colossalai.tsv
$S --topic "$TOPIC" --git $M/mosaicml+composer/repo --tag v0.17.0 --tag v0.24.0 --tag v0.32.1 \
   --path composer/trainer --path composer/utils --path composer/callbacks --path composer/cli \
   --path composer/distributed --path composer/trainer/dist_strategy.py --path composer/core/state.py \
   --path composer/checkpoint --path composer/devices --out $OUT/composer.tsv
$S --topic "$TOPIC" --git $M/mosaicml+llm-foundry/repo --tag v0.4.0 --tag v0.10.0 --tag v0.21.0 \
   --path llmfoundry/callbacks --path llmfoundry/utils --path llmfoundry/data --path llmfoundry/command_utils \
   --path scripts/train --path llmfoundry/models/utils --out $OUT/llm-foundry.tsv
$S --topic "$TOPIC" --git $M/facebookresearch+fairseq/repo --tag v0.10.2 --tag v0.12.3 --tag 3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99 \
   --path fairseq/distributed --path fairseq/distributed_utils.py --path fairseq/checkpoint_utils.py \
   --path fairseq/trainer.py --path fairseq/optim/fp16_optimizer.py --path fairseq/optim/dynamic_loss_scaler.py \
   --path fairseq_cli/train.py --path fairseq/file_io.py --path fairseq/nan_detector.py --path fairseq/utils.py \
   --path fairseq/data/iterators.py --out $OUT/fairseq.tsv
$S --topic "$TOPIC" --git $M/EleutherAI+gpt-neox/repo --tag v1.0 --tag v2.0 --tag ea7aefd8f8e183256992d9fede4d7c71a46d67a5 \
   --path megatron/checkpointing.py --path megatron/training.py --path megatron/initialize.py \
   --path megatron/mpu --path megatron/neox_arguments --path megatron/utils.py --path megatron/data \
   --path deepy.py --path megatron/fused_kernels --path tools/ckpts --out $OUT/gpt-neox.tsv
$S --topic "$TOPIC" --git $M/huggingface+nanotron/repo --tag v0.1 --tag v0.5 --tag 2411b022a75fb7f7561a1bb4166706da5e1b76de \
   --path src/nanotron/serialize --path src/nanotron/parallel/context.py --path src/nanotron/distributed.py \
   --path src/nanotron/trainer.py --path src/nanotron/helpers.py --path src/nanotron/utils.py \
   --path src/nanotron/parallel/pipeline_parallel --path src/nanotron/dataloader.py --path src/nanotron/data \
   --path src/nanotron/s3_checkpoints --path src/nanotron/config --path src/nanotron/optim --out $OUT/nanotron.tsv
