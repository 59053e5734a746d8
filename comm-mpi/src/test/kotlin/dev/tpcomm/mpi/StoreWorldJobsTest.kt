package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.StoreWorldMain
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactlyInAnyOrder
import io.kotest.matchers.ints.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldStartWith
import java.io.File
import java.nio.file.Files
import java.util.UUID
import java.util.concurrent.TimeUnit

/**
 * Issue 33 part 4: N JVMs started with only torchrun's variables (no `mpirun`) form an Open MPI
 * world through the `env://` store: rank 0 starts `ompi-server`, the ranks join by
 * `MPI_Comm_accept`/`MPI_Comm_connect` and merge in rank order. And the failures: a rank that never
 * comes, rank 0 dying, `ompi-server` missing, and MPICH (whose `ch4:ucx` has no `MPI_Open_port`).
 */
class StoreWorldJobsTest : FunSpec({
    // Open MPI's library and its ompi-server (openmpi-bin): the world needs both on rank 0's host.
    val openMpi = (File("/usr/lib/x86_64-linux-gnu/libmpi.so.40").exists() || Launcher.OpenMpi.path != null) &&
        OmpiServer.locate(System.getenv()) != null

    /** One rank's JVM with torchrun's variables only; its output goes to [out]. */
    fun launch(
        rank: Int, world: Int, port: Int, backend: String, timeoutSeconds: Int, out: File, marker: String, env: Map<String, String>,
        prefix: List<String> = emptyList(), masterAddr: String = "127.0.0.1",
    ): Process {
        val cmd = prefix + MpiJobs.javaCommand(StoreWorldMain::class.java.name, listOf(backend, "$timeoutSeconds"), marker)
        val pb = ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out)
        pb.environment().keys.removeIf {
            it.matches(Regex("^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|PET_.*|SLURM_.*|OMPI_.*|PMI_.*|PMIX_.*|MPI_LOCALRANKID|HYDRA_.*|TPCOMM_.*)$"))
        }
        pb.environment().putAll(
            mapOf(
                "RANK" to "$rank", "WORLD_SIZE" to "$world", "LOCAL_RANK" to "$rank", "LOCAL_WORLD_SIZE" to "$world", "GROUP_RANK" to "0",
                "ROLE_RANK" to "$rank", "ROLE_WORLD_SIZE" to "$world", "MASTER_ADDR" to masterAddr, "MASTER_PORT" to "$port",
                "TORCHELASTIC_RESTART_COUNT" to "0", "TORCHELASTIC_MAX_RESTARTS" to "0", "TORCHELASTIC_RUN_ID" to "none",
            ),
        )
        pb.environment().putAll(env)
        return pb.start()
    }

    /**
     * Starts [ranks] of a world of [world] (rank 0 last, so the others wait for its store), waits up
     * to [limitSeconds] for each, and returns each rank's result line.
     */
    fun job(
        world: Int,
        backend: String,
        timeoutSeconds: Int = 60,
        ranks: List<Int> = (0 until world).toList(),
        limitSeconds: Long = 90,
        env: (Int) -> Map<String, String> = { emptyMap() },
        prefix: (Int) -> List<String> = { emptyList() },
        masterAddr: String = "127.0.0.1",
    ): Map<Int, String> {
        val port = java.net.ServerSocket(0).use { it.localPort }
        val dir = Files.createTempDirectory("tpcomm-store-world").toFile()
        val marker = UUID.randomUUID().toString()
        try {
            val procs = ranks.sortedDescending().associateWith { r -> launch(r, world, port, backend, timeoutSeconds, File(dir, "rank-$r.out"), marker, env(r), prefix(r), masterAddr) }
            val deadline = System.nanoTime() + limitSeconds * 1_000_000_000L
            for ((_, p) in procs) {
                if (!p.waitFor((deadline - System.nanoTime()).coerceAtLeast(0), TimeUnit.NANOSECONDS)) {
                    p.toHandle().descendants().forEach { it.destroyForcibly() }
                    p.destroyForcibly()
                }
            }
            return procs.keys.associateWith { r ->
                val out = File(dir, "rank-$r.out").readText()
                out.lines().firstOrNull { it.startsWith("rank ") || it.startsWith("failed ") } ?: "no result line (exit ${procs[r]!!.exitValue()}):\n$out"
            }
        } finally {
            ProcessHandle.allProcesses().filter { it.info().commandLine().orElse("").contains(marker) }.forEach { it.destroyForcibly() }
            dir.deleteRecursively()
        }
    }

    fun sums(lines: Map<Int, String>): List<String> = lines.values.map { it.substringBefore(" create-ms") }

    test("2 JVMs with torchrun's variables, Comm.create(\"mpi\"): an Open MPI world of 2, allReduce right").config(enabled = openMpi) {
        val lines = job(2, "mpi")
        sums(lines) shouldContainExactlyInAnyOrder listOf("rank 0 of 2 backend mpi sum 3", "rank 1 of 2 backend mpi sum 3")
        println("StoreWorldJobsTest world of 2: ${lines.values.joinToString(" | ")}")
    }

    test("3 JVMs with torchrun's variables, Comm.create(\"auto\") picks mpi: ranks as the store's, allReduce right").config(enabled = openMpi) {
        val lines = job(3, "auto")
        sums(lines) shouldContainExactlyInAnyOrder (0 until 3).map { "rank $it of 3 backend mpi sum 6" }
        println("StoreWorldJobsTest world of 3: ${lines.values.joinToString(" | ")}")
    }

    // Two "hosts": network namespaces joined by a veth pair, each with its own host name (unshare
    // --uts), so Open MPI sees two nodes and its ranks talk TCP between them. Needs root and iproute2.
    val netns = openMpi && System.getProperty("user.name") == "root" && File("/usr/sbin/ip").let { it.canExecute() || File("/sbin/ip").canExecute() }
    test("across two network namespaces (two hosts): rank 0 on one, rank 1 on the other, MASTER_ADDR rank 0's address").config(enabled = netns) {
        val tag = "tpsw${(1000..9999).random()}"
        val (a, b) = "$tag-a" to "$tag-b"
        fun ip(vararg args: String) {
            val p = ProcessBuilder(listOf("ip") + args).redirectErrorStream(true).start()
            val out = p.inputStream.bufferedReader().readText()
            check(p.waitFor() == 0) { "ip ${args.joinToString(" ")} failed: $out" }
        }
        try {
            ip("netns", "add", a)
            ip("netns", "add", b)
            ip("link", "add", "$tag-va", "type", "veth", "peer", "name", "$tag-vb")
            ip("link", "set", "$tag-va", "netns", a)
            ip("link", "set", "$tag-vb", "netns", b)
            ip("-n", a, "addr", "add", "10.79.0.1/24", "dev", "$tag-va")
            ip("-n", b, "addr", "add", "10.79.0.2/24", "dev", "$tag-vb")
            for ((ns, dev) in listOf(a to "$tag-va", b to "$tag-vb")) {
                ip("-n", ns, "link", "set", dev, "up")
                ip("-n", ns, "link", "set", "lo", "up")
            }
            val lines = job(2, "mpi", masterAddr = "10.79.0.1", prefix = { r ->
                val ns = if (r == 0) a else b
                listOf("ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", "hostname \"\$1\"; shift; exec \"\$@\"", "sh", ns)
            })
            sums(lines) shouldContainExactlyInAnyOrder listOf("rank 0 of 2 backend mpi sum 3", "rank 1 of 2 backend mpi sum 3")
            println("StoreWorldJobsTest across namespaces: ${lines.values.joinToString(" | ")}")
        } finally {
            runCatching { ip("netns", "del", a) }
            runCatching { ip("netns", "del", b) }
        }
    }

    test("a rank that never comes: the others fail with CommunicationTimeoutException naming it, within the timeout").config(enabled = openMpi) {
        val started = System.nanoTime()
        val lines = job(3, "mpi", timeoutSeconds = 8, ranks = listOf(0, 1), limitSeconds = 40)
        val seconds = ((System.nanoTime() - started) / 1_000_000_000L).toInt()
        for ((_, line) in lines) {
            line shouldStartWith "failed CommunicationTimeoutException"
            line shouldContain "rank 2"
        }
        seconds shouldBeLessThan 30
    }

    test("rank 0 dies while the others wait: they fail at once with CommunicatorAbortedException naming rank 0").config(enabled = openMpi) {
        val lines = job(3, "mpi", timeoutSeconds = 30, ranks = listOf(0, 1), limitSeconds = 40, env = { r -> if (r == 0) mapOf("TPCOMM_TEST_HALT_AFTER_MS" to "7000") else emptyMap() })
        lines[1]!! shouldStartWith "failed CommunicatorAbortedException"
        lines[1]!! shouldContain "rank 0"
        lines[1]!!.substringAfterLast(" after ").substringBefore(" ms").toInt() shouldBeLessThan 20_000
    }

    test("ompi-server missing on rank 0: rank 0 fails naming it, the others with rank 0's reason").config(enabled = File("/usr/lib/x86_64-linux-gnu/libmpi.so.40").exists()) {
        val lines = job(2, "mpi", timeoutSeconds = 30, env = { r -> if (r == 0) mapOf("TPCOMM_OMPI_SERVER" to "/nonexistent/ompi-server") else emptyMap() })
        for ((_, line) in lines) {
            line shouldStartWith "failed BackendUnavailableException"
            line shouldContain "ompi-server"
        }
        lines[1]!! shouldContain "rank 0"
    }

    test("MPICH: Comm.create(\"mpi\") refuses at once, saying why (no MPI_Open_port in ch4:ucx) and which launchers work")
        .config(enabled = File("/usr/lib/x86_64-linux-gnu/libmpich.so.12").exists()) {
            val lines = job(2, "mpi", timeoutSeconds = 30, ranks = listOf(1), limitSeconds = 40, env = { mapOf("TPCOMM_MPI_LIBRARY" to "libmpich.so.12") })
            val line = lines[1]!!
            line shouldStartWith "failed BackendUnavailableException"
            line shouldContain "MPI_Open_port"
            line shouldContain "mpiexec"
            line shouldContain "Open MPI"
            line.substringAfterLast(" after ").substringBefore(" ms").toInt() shouldBeLessThan 10_000
        }
})
