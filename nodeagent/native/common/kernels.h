/*
 * The kernels the test programs (tests/native/progs) and bench/overhead launch, as PTX text:
 * the real driver JIT-compiles it for the card (PTX 7.0 for sm_70 runs on every GPU from Volta
 * on, H100 and H200 included; ptxas 12.9 takes it for sm_70 and sm_90), and simgpu ignores the
 * image and runs each launch for params[0] nanoseconds. Both kernels take a u64
 * first, so one launch means the same on both:
 *   spin(u64 ns)                busy-waits ns nanoseconds by the GPU's global timer
 *   fma(u64 iters, u64 out)     iters rounds of four dependent FMAs a thread (a matmul's inner
 *                               loop without the loads), each thread's sum stored to out[i]
 */
#ifndef TRANCHE_KERNELS_H
#define TRANCHE_KERNELS_H

static const char KERNELS_PTX[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry spin(.param .u64 spin_ns)\n"
    "{\n"
    "    .reg .pred %p<2>;\n"
    "    .reg .b64 %rd<5>;\n"
    "    ld.param.u64 %rd1, [spin_ns];\n"
    "    mov.u64 %rd2, %globaltimer;\n"
    "    add.u64 %rd3, %rd2, %rd1;\n"
    "$L_spin:\n"
    "    mov.u64 %rd4, %globaltimer;\n"
    "    setp.lt.u64 %p1, %rd4, %rd3;\n"
    "    @%p1 bra $L_spin;\n"
    "    ret;\n"
    "}\n"
    "\n"
    ".visible .entry fma(.param .u64 fma_iters, .param .u64 fma_out)\n"
    "{\n"
    "    .reg .pred %p<2>;\n"
    "    .reg .b32 %r<5>;\n"
    "    .reg .f32 %f<9>;\n"
    "    .reg .b64 %rd<7>;\n"
    "    ld.param.u64 %rd1, [fma_iters];\n"
    "    ld.param.u64 %rd2, [fma_out];\n"
    "    mov.u32 %r1, %tid.x;\n"
    "    mov.u32 %r2, %ctaid.x;\n"
    "    mov.u32 %r3, %ntid.x;\n"
    "    mad.lo.s32 %r4, %r2, %r3, %r1;\n"
    "    cvt.rn.f32.u32 %f1, %r4;\n"
    "    mov.f32 %f2, 0f3F800000;\n"
    "    mov.f32 %f3, 0f3F000000;\n"
    "    mov.f32 %f4, 0f3E800000;\n"
    "    mov.f32 %f5, 0f3F7FFFFE;\n"
    "    mov.u64 %rd3, 0;\n"
    "$L_fma:\n"
    "    fma.rn.f32 %f1, %f1, %f5, %f2;\n"
    "    fma.rn.f32 %f2, %f2, %f5, %f3;\n"
    "    fma.rn.f32 %f3, %f3, %f5, %f4;\n"
    "    fma.rn.f32 %f4, %f4, %f5, %f1;\n"
    "    add.u64 %rd3, %rd3, 1;\n"
    "    setp.lt.u64 %p1, %rd3, %rd1;\n"
    "    @%p1 bra $L_fma;\n"
    "    add.f32 %f6, %f1, %f2;\n"
    "    add.f32 %f7, %f3, %f4;\n"
    "    add.f32 %f8, %f6, %f7;\n"
    "    cvta.to.global.u64 %rd4, %rd2;\n"
    "    mul.wide.u32 %rd5, %r4, 4;\n"
    "    add.u64 %rd6, %rd4, %rd5;\n"
    "    st.global.f32 [%rd6], %f8;\n"
    "    ret;\n"
    "}\n";

#endif
