package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainAll
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.longs.shouldBeGreaterThanOrEqual
import io.kotest.matchers.nulls.shouldBeNull
import io.kotest.matchers.nulls.shouldNotBeNull
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import jdk.jfr.Recording
import jdk.jfr.consumer.RecordingFile
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import java.lang.management.ManagementFactory
import java.nio.file.Files
import java.nio.file.Path
import java.util.concurrent.TimeUnit
import javax.management.ObjectName
import kotlin.io.path.exists
import kotlin.io.path.listDirectoryEntries
import kotlin.io.path.name
import kotlin.io.path.readText
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/** The flight recorder seen from a user's program: typed records, dump files, JFR events, the MBean. */
class FlightRecorderObservabilityTest : FunSpec({
    fun tmp(): Path = Files.createTempDirectory("tpcomm-fr")

    /** Runs [block] on every rank of a fresh local world on its own thread; returns each rank's failure (or null). */
    fun world(size: Int, config: CommConfig, block: suspend (Communicator) -> Unit): List<Throwable?> = runBlocking {
        LocalWorld(size, config).use { w ->
            (0 until size).map { r -> async(Dispatchers.Default) { runCatching { block(w.communicator(r)) }.exceptionOrNull() } }.awaitAll()
        }
    }

    fun recorderOf(c: Communicator) = (c as FlightRecorded).flightRecorder

    test("every operation records typed fields; collective sequences agree across ranks; the dump says schema and version") {
        val dumps = arrayOfNulls<FlightRecorderDump>(2)
        world(2, CommConfig(timeout = 5.seconds)) { c ->
            val t = Tensor.of(floatArrayOf(1f, 2f))
            c.allReduce(t, ReduceOp.Max)
            c.broadcast(t, root = 1)
            if (c.rank == 0) c.send(t, dst = 1, tag = 7) else c.recv(t, src = 0, tag = 7)
            c.allGather(Tensor.of(floatArrayOf(1f)), dim = 0)
            c.barrier()
            dumps[c.rank] = FlightRecorder.parseDump(recorderOf(c).dumpJson())
        }
        val d0 = dumps[0].shouldNotBeNull()
        d0.schema shouldBe "tpcomm.flight-recorder"
        d0.version shouldBe 1
        d0.backend shouldBe "local"
        d0.communicator shouldBe "world2"
        d0.worldSize shouldBe 2
        d0.lastSequenceIssued shouldBe 5L
        d0.lastSequenceCompleted shouldBe 5L
        val (ar, bc, p2p, ag, bar) = d0.entries
        ar.operation shouldBe "allReduce"; ar.dtype shouldBe "Float32"; ar.shape shouldBe listOf(2); ar.bytes shouldBe 8L
        ar.reduceOp shouldBe "Max"; ar.root.shouldBeNull(); ar.peer.shouldBeNull(); ar.collectiveSequence shouldBe 1L
        ar.state shouldBe FlightRecorder.State.Completed; ar.outcome shouldBe FlightRecorder.Outcome.Ok
        bc.root shouldBe 1; bc.reduceOp.shouldBeNull(); bc.collectiveSequence shouldBe 2L
        p2p.operation shouldBe "send"; p2p.peer shouldBe 1; p2p.tag shouldBe 7; p2p.collectiveSequence.shouldBeNull()
        ag.dim shouldBe 0; ag.collectiveSequence shouldBe 3L
        bar.operation shouldBe "barrier"; bar.dtype.shouldBeNull(); bar.collectiveSequence shouldBe 4L
        dumps[1]!!.entries[2].let { it.operation shouldBe "recv"; it.peer shouldBe 0; it.tag shouldBe 7 }
        dumps[1]!!.entries.map { it.collectiveSequence } shouldContainExactly listOf(1L, 2L, null, 3L, 4L)
        val json = recorderOf(LocalWorld(1).communicator(0)).dumpJson()
        json shouldContain "\"schema\":\"tpcomm.flight-recorder\""
        json shouldContain "\"version\":1"
    }

    test("a failed entry's outcome follows the exception type") {
        val rec = FlightRecorder(8)
        rec.start("a").fail(CommunicationTimeoutException("t", 0, "x", "a", 1))
        rec.start("b").fail(dev.tpcomm.CollectiveMismatchException("m", 0, "x", "b", 2, listOf(1), listOf("shape")))
        rec.start("c").fail(dev.tpcomm.CommunicatorAbortedException("ab", 0, "x", "c", 3))
        rec.start("d").fail(kotlinx.coroutines.CancellationException("cancel"))
        rec.start("e").fail(IllegalStateException("boom"))
        rec.snapshot().map { it.outcome } shouldContainExactly listOf(
            FlightRecorder.Outcome.Timeout, FlightRecorder.Outcome.Mismatch, FlightRecorder.Outcome.Aborted,
            FlightRecorder.Outcome.Cancelled, FlightRecorder.Outcome.Error,
        )
        rec.sawFailure shouldBe true
        val json = rec.dumpJson()
        json shouldContain "\"outcome\":\"timeout\""
        json shouldContain "\"outcome\":\"cancelled\""
        rec.close()
    }

    test("on a timeout every rank writes <dir>/<communicator>-rank<R>.json: the waiting ranks show the timeout, the late rank what it did last") {
        val dir = tmp()
        val errors = world(3, CommConfig(timeout = 300.milliseconds, flightRecorderDir = dir.toString())) { c ->
            c.allReduce(Tensor.of(floatArrayOf(1f)))
            if (c.rank == 2) delay(900) // sleeps through the deadline of the second all-reduce
            c.allReduce(Tensor.of(floatArrayOf(1f)))
        }
        errors[0].shouldBeInstanceOf<CommunicationTimeoutException>()
        dir.listDirectoryEntries("*.json").map { it.name }.sorted() shouldContainExactly listOf("world3-rank0.json", "world3-rank1.json", "world3-rank2.json")
        val d0 = FlightRecorder.parseDump(dir.resolve("world3-rank0.json").readText())
        d0.entries.last().let {
            it.collectiveSequence shouldBe 2L
            it.state shouldBe FlightRecorder.State.Failed
            it.outcome shouldBe FlightRecorder.Outcome.Timeout
        }
        d0.aborted shouldBe true
        val d2 = FlightRecorder.parseDump(dir.resolve("world3-rank2.json").readText())
        d2.entries.first().let { it.collectiveSequence shouldBe 1L; it.state shouldBe FlightRecorder.State.Completed }
        // The late rank's second call came after the abort: recorded as aborted, at sequence 2.
        d2.entries.last().outcome shouldBe FlightRecorder.Outcome.Aborted
        d2.reason shouldBe "close"
    }

    test("dumpFlightRecorder writes on demand into the configured or given directory, and refuses without one") {
        val dir = tmp()
        LocalWorld(1, CommConfig(flightRecorderDir = dir.toString())).use { w ->
            val c = w.communicator(0)
            runBlocking { c.allReduce(Tensor.of(floatArrayOf(1f))) }
            val file = c.dumpFlightRecorder()
            file shouldBe dir.resolve("world1-rank0.json")
            FlightRecorder.parseDump(file.readText()).let { it.reason shouldBe "on-demand"; it.entries.single().operation shouldBe "allReduce" }
        }
        LocalWorld(1).use { w ->
            shouldThrow<IllegalStateException> { w.communicator(0).dumpFlightRecorder() }.message shouldContain "TPCOMM_FLIGHT_RECORDER_DIR"
            val other = tmp()
            w.communicator(0).dumpFlightRecorder(other).exists() shouldBe true
        }
        CommConfig.fromEnvironment(mapOf("TPCOMM_FLIGHT_RECORDER_DIR" to "/tmp/x")).flightRecorderDir shouldBe "/tmp/x"
    }

    test("a healthy close writes nothing; parseDump refuses another schema version") {
        val dir = tmp()
        world(2, CommConfig(flightRecorderDir = dir.toString())) { c -> c.allReduce(Tensor.of(floatArrayOf(1f))) }
        dir.listDirectoryEntries().size shouldBe 0
        shouldThrow<IllegalArgumentException> {
            FlightRecorder.parseDump(
                """{"schema":"tpcomm.flight-recorder","version":2,"backend":"x","communicator":"w","rank":0,"worldSize":1,"reason":"x",""" +
                    """"pid":1,"dumpedAtEpochMicros":0,"lastSequenceIssued":0,"lastSequenceCompleted":0,"aborted":false,"abortCause":null,"entries":[]}""",
            )
        }.message shouldContain "version 1"
    }

    test("JVM shutdown (a launcher's SIGTERM) dumps the open communicators") {
        val dir = tmp()
        val java = ProcessHandle.current().info().command().get()
        val p = ProcessBuilder(java, "-cp", System.getProperty("java.class.path"), ShutdownDumpMain::class.java.name, dir.toString())
            .redirectErrorStream(true).start()
        val out = p.inputStream.bufferedReader()
        val lines = generateSequence { out.readLine() }.takeWhile { it != "ready" }.toList()
        withClue("the child's output before it was ready: $lines") { p.isAlive shouldBe true }
        p.destroy() // SIGTERM
        p.waitFor(30, TimeUnit.SECONDS) shouldBe true
        val d = FlightRecorder.parseDump(dir.resolve("world2-rank1.json").readText())
        d.reason shouldBe "shutdown"
        d.entries.map { it.operation } shouldContainExactly listOf("allReduce", "barrier")
        d.entries.last().state shouldBe FlightRecorder.State.Started
    }

    test("JFR: collectives, point-to-point calls, splits and aborts are events with the typed fields") {
        val file = tmp().resolve("rec.jfr")
        Recording().use { rec ->
            for (e in listOf("dev.tpcomm.Collective", "dev.tpcomm.PointToPoint", "dev.tpcomm.Split", "dev.tpcomm.Abort")) rec.enable(e).withoutThreshold()
            rec.start()
            world(2, CommConfig(timeout = 300.milliseconds)) { c ->
                c.allReduce(Tensor.of(floatArrayOf(1f, 2f)), ReduceOp.Sum)
                if (c.rank == 0) c.send(Tensor.of(intArrayOf(3)), dst = 1, tag = 4) else c.recv(Tensor.of(intArrayOf(0)), src = 0, tag = 4)
                c.split(color = 0, key = c.rank)?.close()
                if (c.rank == 0) c.broadcast(Tensor.of(floatArrayOf(1f)), root = 1) // rank 1 never comes: timeout, abort
            }
            rec.stop()
            rec.dump(file)
        }
        val events = RecordingFile.readAllEvents(file)
        val coll = events.filter { it.eventType.name == "dev.tpcomm.Collective" }
        val ar = coll.first { it.getString("operation") == "allReduce" && it.getInt("rank") == 0 }
        ar.getString("backend") shouldBe "local"
        ar.getString("communicator") shouldBe "world2"
        ar.getInt("worldSize") shouldBe 2
        ar.getString("dtype") shouldBe "Float32"
        ar.getString("shape") shouldBe "[2]"
        ar.getLong("bytes") shouldBe 8L
        ar.getString("reduceOp") shouldBe "Sum"
        ar.getString("outcome") shouldBe "ok"
        ar.getLong("collectiveSequence") shouldBe 1L
        ar.eventType.categoryNames shouldContainExactly listOf("tpcomm")
        val bc = coll.first { it.getString("operation") == "broadcast" }
        bc.getInt("root") shouldBe 1
        bc.getString("outcome") shouldBe "timeout"
        bc.duration.toMillis() shouldBeGreaterThanOrEqual 250L
        val p2p = events.filter { it.eventType.name == "dev.tpcomm.PointToPoint" }
        p2p.map { it.getString("operation") }.toSet() shouldBe setOf("send", "recv")
        p2p.first { it.getString("operation") == "send" }.let { it.getInt("peer") shouldBe 1; it.getInt("tag") shouldBe 4 }
        events.filter { it.eventType.name == "dev.tpcomm.Split" }.map { it.getString("operation") } shouldContainAll listOf("split")
        events.filter { it.eventType.name == "dev.tpcomm.Abort" }.map { it.getInt("rank") }.toSet() shouldContainAll setOf(0, 1)
    }

    test("JMX: an MBean per communicator shows rank, sequences, the operation in flight with its age, the abort, and leaves on close") {
        // The server first, as a JMX user's JVM has it (agent, JConsole): registration is then immediate.
        val server = ManagementFactory.getPlatformMBeanServer()
        LocalWorld(2, CommConfig(timeout = 2.seconds)).use { w ->
            val c0 = w.communicator(0)
            val rec = recorderOf(c0)
            val name = ObjectName("dev.tpcomm:type=Communicator,backend=\"local\",communicator=\"world2\",rank=0,instance=${rec.instance}")
            server.isRegistered(name) shouldBe true
            runBlocking {
                val job = launch(Dispatchers.Default) { runCatching { c0.allReduce(Tensor.of(floatArrayOf(1f))) } }
                delay(200)
                server.getAttribute(name, "Rank") shouldBe 0
                server.getAttribute(name, "Backend") shouldBe "local"
                server.getAttribute(name, "LastSequenceIssued") shouldBe 1L
                server.getAttribute(name, "LastSequenceCompleted") shouldBe 0L
                server.getAttribute(name, "InFlightCount") shouldBe 1
                (server.getAttribute(name, "OldestInFlightMillis") as Long) shouldBeGreaterThanOrEqual 150L
                (server.getAttribute(name, "InFlight") as Array<*>).single().toString() shouldContain "seq 1 (collective 1) allReduce Float32[1] op=Sum"
                server.getAttribute(name, "Aborted") shouldBe false
                job.join()
            }
            server.getAttribute(name, "Aborted") shouldBe true
            (server.getAttribute(name, "AbortCause") as String) shouldContain "timed out"
            (server.getAttribute(name, "RecentRecords") as Array<*>).single().toString() shouldContain "Failed timeout"
            (server.invoke(name, "dumpJson", null, null) as String) shouldContain "\"version\":1"
            w.close()
            server.isRegistered(name) shouldBe false
        }
    }
})

/** A child JVM for the shutdown test: rank 1 of a 2-rank world waits in a barrier until the JVM is killed. */
object ShutdownDumpMain {
    @JvmStatic
    fun main(args: Array<String>) {
        val w = LocalWorld(2, CommConfig(timeout = 60.seconds, flightRecorderDir = args[0]))
        runBlocking {
            coroutineScope {
                for (r in 0..1) launch(Dispatchers.Default) { w.communicator(r).allReduce(Tensor.of(floatArrayOf(1f))) }
            }
            launch(Dispatchers.Default) { w.communicator(1).barrier() }
            delay(100)
            println("ready")
            System.out.flush()
            delay(60_000)
        }
    }
}
