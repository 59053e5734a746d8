package dev.tpcomm.examples

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotContain

/** The demo's last line says why overlap can be slower, instead of a bare "0.85x". */
class OverlapNoteTest : FunSpec({
    test("a slower overlapped step on a shared machine is explained: ranks and collectives share the cores") {
        val note = TpDemo.overlapNote(0.85, ranks = 4, cores = 2, backend = "local", sequenceParallel = false)
        note shouldContain "slower here (0.85x)"
        note shouldContain "CPU work"
        note shouldContain "same 4 ranks that compute, on this machine's 2 cores"
        note shouldContain "two half-size calls"
        note shouldContain "docs/overlap.md"
    }

    test("sequence-parallel has no split forward all-reduce to blame") {
        val note = TpDemo.overlapNote(0.9, ranks = 2, cores = 1, backend = "mpi", sequenceParallel = true)
        note shouldContain "slower here (0.90x)"
        note shouldContain "this machine's 1 core,"
        note shouldNotContain "half-size"
    }

    test("no difference and a real speed-up are named as such") {
        TpDemo.overlapNote(1.0, 4, 2, "local", false) shouldContain "no difference here (1.00x)"
        TpDemo.overlapNote(1.3, 4, 16, "nccl", false) shouldContain "1.30x faster"
    }
})
