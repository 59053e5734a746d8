package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldHaveSize
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.io.File
import kotlin.time.Duration.Companion.seconds

/**
 * The GPU check's sweep harness, run on the simulated platform (its timings mean nothing; its
 * format and both modes, including several calls in flight, are what is checked): the lines it
 * prints are what `scripts/gpu/sweep_report.py` reads, and they are written to
 * `target/sweep-sim.txt` for `scripts/gpu/sweep_report.py --self-test`.
 */
class AllReduceSweepTest : FunSpec({
    test("the sweep prints one line per size and mode on rank 0 with ROUNDS positive timings") {
        SimulatedGpuPlatform(rejectSharedDevices = false).use { platform ->
            val world = SimulatedWorld(platform) { dev.tpcomm.Device.Cuda(0) }
            val printed = world.run(2, CommConfig(timeout = 30.seconds)) { comm ->
                AllReduceSweep.run(comm, DeviceCopies(platform.runtime, comm.device), impl = "tpcomm-sim", maxBytes = 1024, out = {})
            }
            printed[1] shouldHaveSize 0
            val lines = printed[0]
            lines shouldHaveSize 2 * 8 // 8, 16, ..., 1024 bytes; each and pipelined
            for ((i, line) in lines.withIndex()) {
                val f = line.split(" ")
                f.take(3) shouldBe listOf("sweep", "tpcomm-sim", if (i % 2 == 0) "each" else "pipelined")
                f[3].toLong() shouldBe (8L shl (i / 2))
                f.drop(4).map { it.toDouble() }.also { it shouldHaveSize AllReduceSweep.ROUNDS }.all { it > 0.0 } shouldBe true
            }
            platform.assertNoMisuse()
            File("target").mkdirs()
            File("target/sweep-sim.txt").writeText(lines.joinToString("\n", postfix = "\n"))
        }
    }

    test("the latency loop prints one line per block on rank 0 and a summary of the first 20,000 calls against the steady state") {
        SimulatedGpuPlatform(rejectSharedDevices = false).use { platform ->
            val world = SimulatedWorld(platform) { dev.tpcomm.Device.Cuda(0) }
            val printed = java.util.concurrent.ConcurrentHashMap<Int, MutableList<String>>()
            world.run(2, CommConfig(timeout = 30.seconds)) { comm ->
                AllReduceLatency.run(comm, DeviceCopies(platform.runtime, comm.device), impl = "tpcomm-sim", calls = 300, block = 100,
                    out = { printed.getOrPut(comm.rank) { java.util.Collections.synchronizedList(mutableListOf()) } += it })
            }
            printed[1] shouldBe null
            val lines = printed[0]!!
            lines shouldHaveSize 4
            lines.take(3).map { it.split(" ").subList(0, 5) } shouldBe listOf(
                listOf("latency", "tpcomm-sim", "8", "1", "100"), listOf("latency", "tpcomm-sim", "8", "101", "200"), listOf("latency", "tpcomm-sim", "8", "201", "300"))
            lines[3] shouldContain "latency tpcomm-sim 8 summary: first 20,000 calls "
            platform.assertNoMisuse()
        }
    }
})

