package dev.tpcomm.bench

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import kotlinx.coroutines.runBlocking
import java.lang.management.ManagementFactory
import kotlin.time.Duration.Companion.seconds

/**
 * The GPU engine's all-gather loop of issue 34 on the simulated platform (comm-gpu's test-jar: no
 * GPU, the real engine over a simulated NCCL and CUDA runtime), one measurement per JVM:
 *
 * `allgather ELEMENTS N closed|forgotten CAPACITY_MIB`: a world of 2 simulated devices of
 * CAPACITY_MIB each; each rank all-gathers a Float32 tensor of ELEMENTS N times and closes each
 * output or forgets it (unreachable at once). After a warm-up of 50 iterations (not counted). Prints
 * `done allgather elements <e> n <n> mode <m> us_per_iter <t> cpu_us_per_iter <c> malloc_async <a> live_streams <s>`
 * (malloc_async: the simulated `cudaMallocAsync` calls of the measured iterations, both ranks;
 * cpu: the whole process's CPU time per iteration, GC and cleaners included).
 *
 * `scripts/device-pool-bench.sh` runs it in fresh JVMs.
 */
public object DevicePoolBenchMain {
    private const val WARM_UP = 50

    /** Entry point; see the object's documentation. */
    @JvmStatic
    public fun main(args: Array<String>) {
        if (args.getOrNull(0) != "allgather" || args.size != 5 || args[3] !in setOf("closed", "forgotten")) {
            System.err.println("usage: DevicePoolBenchMain allgather ELEMENTS N closed|forgotten CAPACITY_MIB")
            kotlin.system.exitProcess(2)
        }
        val elements = args[1].toInt()
        val n = args[2].toInt()
        val close = args[3] == "closed"
        val platform = SimulatedGpuPlatform(deviceMemoryBytes = args[4].toLong() shl 20)
        val os = ManagementFactory.getOperatingSystemMXBean() as com.sun.management.OperatingSystemMXBean
        val results = runBlocking {
            SimulatedWorld(platform).run(2, CommConfig(timeout = 120.seconds)) { c ->
                val input = platform.upload(Tensor.zeros(DType.Float32, elements), Device.Cuda(c.rank))
                repeat(WARM_UP) { c.allGather(input).also { if (close) it.close() } }
                c.barrier()
                val malloc0 = platform.mallocAsyncCalls
                val cpu0 = os.processCpuTime
                val start = System.nanoTime()
                repeat(n) { c.allGather(input).also { if (close) it.close() } }
                c.barrier()
                Triple(System.nanoTime() - start, os.processCpuTime - cpu0, platform.mallocAsyncCalls - malloc0)
            }
        }
        val (nanos, cpu, mallocs) = results.maxBy { it.first }
        platform.assertNoMisuse()
        println(
            "done allgather elements $elements n $n mode ${args[3]} us_per_iter ${"%.1f".format(nanos / 1e3 / n)} " +
                "cpu_us_per_iter ${"%.1f".format(cpu / 1e3 / n)} malloc_async $mallocs live_streams ${platform.liveStreams}",
        )
        platform.close()
    }
}
