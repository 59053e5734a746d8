package dev.tpcomm.mpi

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.comparables.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.mockk.mockk
import java.io.ByteArrayOutputStream
import java.io.PrintStream
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration.Companion.seconds
import kotlin.time.TimeSource

/**
 * How a rank ends MPI ([MpiRuntime.finalizeOnce]) against a mocked native seam: the barrier on
 * `MPI_COMM_WORLD` that tells "a peer is still working" (wait for it, up to the timeout) from
 * "`MPI_Finalize` will never return" (MPICH 4.0.2 with UCX across hosts, docs/mpi.md).
 */
class MpiFinalizeTest : FunSpec({
    val library = MpiLibrary("libmpich.so.12", 0L, "MPICH Version: 4.0.2", MpiImplementation.Mpich)

    /**
     * A binding whose barrier completes when [barrierCompletes], and whose MPI_Finalize blocks when
     * [finalizeHangs]; counts the calls. Hand-written over a relaxed mock: MockK cannot stub a
     * method named `finalize`.
     */
    class Binding(val barrierCompletes: Boolean, val finalizeHangs: Boolean) : MpiBinding by mockk<MpiBinding>(relaxed = true) {
        val barriers = AtomicInteger()
        val finalizes = AtomicInteger()
        override val abi: MpiAbi get() = MpichAbi
        override fun finalized(flagOut: Long): Int { MemorySegment.ofAddress(flagOut).reinterpret(4).set(ValueLayout.JAVA_INT, 0, 0); return 0 }
        override fun ibarrier(comm: Long, request: Long): Int { barriers.incrementAndGet(); return 0 }
        override fun test(request: Long, flagOut: Long, status: Long): Int {
            MemorySegment.ofAddress(flagOut).reinterpret(4).set(ValueLayout.JAVA_INT, 0, if (barrierCompletes) 1 else 0)
            return 0
        }
        override fun finalize(): Int {
            finalizes.incrementAndGet()
            if (finalizeHangs) Thread.sleep(Long.MAX_VALUE)
            return 0
        }
    }

    fun binding(barrierCompletes: Boolean, finalizeHangs: Boolean) = Binding(barrierCompletes, finalizeHangs)

    fun runtime(b: Binding, halts: MutableList<Int>): MpiRuntime =
        MpiRuntime(library, b, MpiThreadLevel.Multiple.value, true, -1).also { r ->
            r.halt = { code -> halts += code }
            r.noteTimeout(1.seconds.inWholeNanoseconds)
            r.retain()
        }

    fun stderrOf(block: () -> Unit): String {
        val saved = System.err
        val buffer = ByteArrayOutputStream()
        System.setErr(PrintStream(buffer, true))
        try { block() } finally { System.setErr(saved) }
        return buffer.toString()
    }

    test("every rank reached finalize but MPI_Finalize never returns: the rank leaves it after 10 s with the program's status, no halt") {
        val b = binding(barrierCompletes = true, finalizeHangs = true)
        val halts = CopyOnWriteArrayList<Int>()
        val r = runtime(b, halts)
        val start = TimeSource.Monotonic.markNow()
        val err = stderrOf { r.release() }
        val took = start.elapsedNow()
        took shouldBeLessThan 13.seconds
        (took > 9.seconds) shouldBe true // 10 s after the barrier, not the 1 s + 2 s of a missing peer
        halts shouldBe emptyList()
        err shouldContain "every rank reached MPI_Finalize, but MPI_Finalize did not return within 10s"
        b.barriers.get() shouldBe 1
    }

    test("a peer never reaches finalize: the rank waits the timeout plus 2 s, says so and ends with exit code 14") {
        val b = binding(barrierCompletes = false, finalizeHangs = false)
        val halts = CopyOnWriteArrayList<Int>()
        val r = runtime(b, halts)
        val start = TimeSource.Monotonic.markNow()
        val err = stderrOf { r.release() }
        start.elapsedNow() shouldBeLessThan 6.seconds
        halts shouldBe listOf(MpiBackend.ABORT_CODE)
        err shouldContain "another rank of the job has not finished"
        Thread.sleep(100)
        b.finalizes.get() shouldBe 0 // MPI_Finalize is never entered while a peer may still be working
    }

    test("a healthy finalize: the barrier completes, MPI_Finalize returns, nothing is printed") {
        val b = binding(barrierCompletes = true, finalizeHangs = false)
        val halts = CopyOnWriteArrayList<Int>()
        val r = runtime(b, halts)
        val err = stderrOf { r.release() }
        halts shouldBe emptyList()
        err shouldBe ""
        b.finalizes.get() shouldBe 1
    }
})
