package dev.tpcomm.store

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.runBlocking
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicLong
import kotlin.time.Duration.Companion.seconds

/**
 * Store throughput, operations per second: each client repeats `add(its own key, 1)` (one request,
 * one reply: a round trip) for [SECONDS] seconds; 1 and 64 clients; tpcomm's server and PyTorch's
 * (libuv, libtorch 2.10) in the same run, alternating, with tpcomm's client and with PyTorch's.
 * Prints one CSV line per measurement and a summary (median, min, max over the repeats).
 *
 * `java -cp <test classpath> dev.tpcomm.store.StoreThroughputBench [repeats]` (docs/launch.md).
 */
object StoreThroughputBench {
    private const val SECONDS = 1.0

    @JvmStatic
    fun main(args: Array<String>) {
        val repeats = args.firstOrNull()?.toInt() ?: 5
        val results = LinkedHashMap<String, MutableList<Double>>()
        println("server,client,clients,ops_per_s")
        repeat(repeats) {
            for (server in listOf("tpcomm", "pytorch")) {
                for (client in listOf("tpcomm", "pytorch")) {
                    for (clients in listOf(1, 64)) {
                        val rate = measure(server, client, clients)
                        println("$server,$client,$clients,${"%.0f".format(rate)}")
                        results.getOrPut("$server server, $client client, $clients clients") { ArrayList() }.add(rate)
                    }
                }
            }
        }
        println()
        println("| server | client | clients | ops/s median | min | max |")
        println("|---|---|---|---|---|---|")
        for ((k, v) in results) {
            val s = v.sorted()
            val parts = k.split(", ")
            println("| ${parts[0]} | ${parts[1]} | ${parts[2].removeSuffix(" clients")} | ${"%,.0f".format(s[s.size / 2])} | ${"%,.0f".format(s.first())} | ${"%,.0f".format(s.last())} |")
        }
    }

    private fun measure(server: String, client: String, clients: Int): Double {
        val tp = if (server == "tpcomm") TcpStoreServer.start(port = 0, host = "127.0.0.1") else null
        val pt = if (server == "pytorch") PyTorchStore.server() else null
        val port = tp?.port ?: pt!!.port
        try {
            val ops = AtomicLong()
            val stop = AtomicBoolean(false)
            return if (client == "tpcomm") {
                runBlocking(Dispatchers.IO) {
                    val stores = (0 until clients).map { async { TcpStore.connect("127.0.0.1", port, 30.seconds) } }.awaitAll()
                    try {
                        val start = System.nanoTime()
                        val deadline = start + (SECONDS * 1e9).toLong()
                        stores.mapIndexed { i, s ->
                            async {
                                var n = 0L
                                while (System.nanoTime() < deadline) { s.add("k$i", 1); n++ }
                                ops.addAndGet(n)
                            }
                        }.awaitAll()
                        ops.get() / ((System.nanoTime() - start) / 1e9)
                    } finally {
                        stores.forEach { it.close() }
                    }
                }
            } else {
                val stores = (0 until clients).map { PyTorchStore.client(port) }
                try {
                    val start = System.nanoTime()
                    val threads = stores.mapIndexed { i, s ->
                        Thread {
                            var n = 0L
                            while (!stop.get()) { s.add("k$i", 1); n++ }
                            ops.addAndGet(n)
                        }.apply { start() }
                    }
                    Thread.sleep((SECONDS * 1000).toLong())
                    stop.set(true)
                    threads.forEach { it.join() }
                    ops.get() / ((System.nanoTime() - start) / 1e9)
                } finally {
                    stores.forEach { it.close() }
                }
            }
        } finally {
            tp?.close()
            pt?.close()
        }
    }
}
