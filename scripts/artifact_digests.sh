#!/usr/bin/env bash
# Compiles every reference model for every --cpu preset (x86-64 and aarch64), FP16 and
# INT8, and with each --kernel choice, and writes OUTDIR/SUMS: one sha256 per artifact.
# Two nnc builds that must generate the same code (a refactor) give identical SUMS.
#
#   MODELS_DIR=../shared/models scripts/artifact_digests.sh NNC OUTDIR [flags|env]
#
# `env` passes the choices as the NNC_* environment switches that nnc versions before
# `--kernel` read, for comparing against one of those.
set -u
NNC=$1; OUT=$2; MODE=${3:-flags}
M=${MODELS_DIR:?set MODELS_DIR to a folder of reference models}
mkdir -p $OUT
for model in resnet18 mobilenet_v2 squeezenet1_1 vit_tiny_l4_d256 minibert_l4_d256 digits_cnn; do
  for cpu in baseline x86-64-v3 x86-64-v4 x86-64-v4+vnni native; do
    $NNC compile $M/$model.onnx --cpu $cpu -o $OUT/$model.$cpu.so >/dev/null 2>$OUT/$model.$cpu.err || echo "FAIL $model $cpu"
  done
  for cpu in armv8 +dotprod +i8mm; do
    $NNC compile $M/$model.onnx --target aarch64 --cpu $cpu -o $OUT/$model.a64$cpu.so >/dev/null 2>$OUT/$model.a64$cpu.err || echo "FAIL $model a64 $cpu"
  done
  $NNC compile $M/$model.onnx --cpu x86-64-v4 --quantize fp16 -o $OUT/$model.fp16.so >/dev/null 2>&1 || echo "FAIL fp16 $model"
done
# int8 digits and resnet (small calibration)
for cpu in baseline x86-64-v3 x86-64-v4+vnni native; do
  $NNC compile $M/digits_cnn.onnx --cpu $cpu --quantize int8 --calibration $M/digits_calib_images.npy -o $OUT/digits.int8.$cpu.so >/dev/null 2>&1 || echo "FAIL int8 $cpu"
done
$NNC compile $M/digits_cnn.onnx --target aarch64 --cpu +i8mm --quantize int8 --calibration $M/digits_calib_images.npy -o $OUT/digits.int8.a64.so >/dev/null 2>&1 || echo "FAIL int8 a64"
# switches
sw() { # name envassign flag
  if [ $MODE = env ]; then env $2 $NNC compile $M/$4.onnx --cpu ${5:-x86-64-v4} -o $OUT/sw.$1.so >/dev/null 2>&1 || echo "FAIL sw $1"
  else $NNC compile $M/$4.onnx --cpu ${5:-x86-64-v4} $3 -o $OUT/sw.$1.so >/dev/null 2>&1 || echo "FAIL sw $1"; fi
}
sw gemmclif NNC_GEMM_KERNEL=clif "--kernel gemm=clif --kernel pool=clif --kernel winograd-transform=clif --kernel dwconv=clif --kernel softmax=clif" resnet18
sw dwclif NNC_DWCONV_KERNEL=clif "--kernel dwconv=clif" mobilenet_v2
sw wino_off NNC_WINOGRAD=off "--kernel winograd=off" resnet18
sw wino2 NNC_WINOGRAD=2 "--kernel winograd=f2" resnet18
sw wino4 NNC_WINOGRAD=4 "--kernel winograd=f4" resnet18
sw winoclif NNC_WINOGRAD_KERNEL=clif "--kernel winograd-transform=clif" resnet18
sw phases NNC_PHASE_PLANES=off "--kernel phase-planes=off" resnet18
sw narrow NNC_NARROW_CONV=off "--kernel narrow-conv=off" resnet18
sw rows NNC_CONV_ROWS=wide "--kernel conv-rows=wide" resnet18
sw seppool NNC_SEPARABLE_POOL=off "--kernel separable-pool=off" resnet18
sw poolclif NNC_POOL_KERNEL=clif "--kernel pool=clif" resnet18
sw softclif NNC_SOFTMAX_KERNEL=clif "--kernel softmax=clif" vit_tiny_l4_d256
sw prefetch NNC_GEMM_PREFETCH=off "--kernel gemm-prefetch=off" resnet18
sw order_blocks NNC_GEMM_ORDER=blocks "--kernel gemm-order=blocks" resnet18
sw order_panels NNC_GEMM_ORDER=panels "--kernel gemm-order=panels" resnet18
sw passes_none NNC_PASSES=none "--passes none" resnet18
sw8() {
  if [ $MODE = env ]; then env $2 $NNC compile $M/digits_cnn.onnx --cpu x86-64-v4+vnni --quantize int8 --calibration $M/digits_calib_images.npy -o $OUT/sw.$1.so >/dev/null 2>&1 || echo "FAIL sw $1"
  else $NNC compile $M/digits_cnn.onnx --cpu x86-64-v4+vnni --quantize int8 --calibration $M/digits_calib_images.npy $3 -o $OUT/sw.$1.so >/dev/null 2>&1 || echo "FAIL sw $1"; fi
}
sw8 int8clif NNC_INT8_KERNEL=clif "--kernel int8-conv=clif"
sw8 int8tiles NNC_INT8_ORDER=tiles "--kernel int8-order=tiles"
sw8 int8panels NNC_INT8_ORDER=panels "--kernel int8-order=panels"
cd $OUT && sha256sum *.so > SUMS
