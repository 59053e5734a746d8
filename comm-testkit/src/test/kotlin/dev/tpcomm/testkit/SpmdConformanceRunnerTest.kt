package dev.tpcomm.testkit

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrowAny
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext
import java.nio.file.Files
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicIntegerArray
import javax.xml.parsers.DocumentBuilderFactory
import kotlin.time.Duration

/**
 * Fresh in-process worlds for the failure cases, as a multi-process harness would create fresh
 * communicators: the n-th call on every rank gets that rank's communicator of the n-th world.
 */
private class LocalScratch(worldSize: Int) : ScratchCommunicatorFactory {
    private val worlds = ConcurrentHashMap<Int, LocalWorld>()
    private val generation = AtomicIntegerArray(worldSize)

    override suspend fun create(parent: Communicator, timeout: Duration): Communicator {
        val gen = generation.getAndIncrement(parent.rank)
        val world = worlds.computeIfAbsent(gen) { LocalWorld(parent.worldSize, CommConfig(worldSize = parent.worldSize, timeout = timeout, checkConsistency = true)) }
        return world.communicator(parent.rank)
    }
}

class SpmdConformanceRunnerTest : FunSpec({
    val options = ConformanceOptions(randomCollectives = 10)

    test("every rank of an SPMD world runs every case in order and the results go to JUnit XML") {
        val n = 3
        val scratch = LocalScratch(n)
        val reported = ConcurrentHashMap<Int, MutableList<String>>()
        val results = withContext(Dispatchers.Default) {
            runLocalWorld(n, CommConfig(worldSize = n, checkConsistency = true)) { comm ->
                SpmdConformanceRunner.run(comm, report = { reported.getOrPut(comm.rank) { mutableListOf() } += it.case }, options = options, scratch = scratch)
            }
        }
        val expectedCases = ConformanceCases.all.filter { it.kind != CaseKind.Soak }.sortedBy { it.kind.ordinal }.map { it.name }
        for (r in 0 until n) {
            results[r].map { it.case } shouldBe expectedCases
            reported[r] shouldBe expectedCases
            results[r].filter { it.status == CaseResult.Status.Failed }.map { it.message }.shouldBeEmpty()
            results[r].all { it.rank == r && it.worldSize == n } shouldBe true
        }

        val file = Files.createTempDirectory("testkit").resolve("reports/TEST-local-3.xml")
        writeJUnitXml(file, "local-3", results.flatten())
        val doc = DocumentBuilderFactory.newInstance().newDocumentBuilder().parse(file.toFile())
        val suite = doc.documentElement
        suite.getAttribute("name") shouldBe "local-3"
        suite.getAttribute("tests") shouldBe "${n * expectedCases.size}"
        suite.getAttribute("failures") shouldBe "0"
        doc.getElementsByTagName("testcase").length shouldBe n * expectedCases.size
        suite.getAttribute("skipped") shouldBe "${results.flatten().count { it.status == CaseResult.Status.Skipped }}"
    }

    test("without a scratch factory the failure cases are reported skipped, and a filter selects cases") {
        val results = withContext(Dispatchers.Default) {
            runLocalWorld(2, CommConfig(worldSize = 2)) { comm ->
                SpmdConformanceRunner.run(comm, filter = { it.kind == CaseKind.Failure || it.name.startsWith("barrier") }, options = options)
            }
        }
        for (r in results) {
            r.first().case shouldContain "barrier"
            r.first().status shouldBe CaseResult.Status.Passed
            r.drop(1).all { it.status == CaseResult.Status.Skipped && it.message!!.contains("ScratchCommunicatorFactory") } shouldBe true
        }
    }

    // The first GPU run (2026-11-28) failed 38 cases for one defect: the case that hit it aborted
    // the communicator every later collective case shares, so each of them failed on "aborted".
    test("a case that aborts the shared communicator fails alone: the later cases run on a fresh one, which the run closes") {
        val n = 2
        val scratch = LocalScratch(n)
        val used = ConcurrentHashMap<Int, MutableList<Communicator>>()
        val reported = ConcurrentHashMap<Int, MutableList<CaseResult>>()
        val cases = listOf(
            ConformanceCase("aborts", CaseKind.Collective) { comm, _ -> used.getOrPut(comm.rank) { mutableListOf() } += comm; comm.barrier(); comm.abort("a defect") },
            ConformanceCase("after it", CaseKind.Collective) { comm, _ -> used.getOrPut(comm.rank) { mutableListOf() } += comm; comm.barrier() },
            ConformanceCase("after it too", CaseKind.Collective) { comm, _ -> used.getOrPut(comm.rank) { mutableListOf() } += comm; comm.barrier() },
        )
        val results = withContext(Dispatchers.Default) {
            runLocalWorld(n, CommConfig(worldSize = n)) { comm ->
                SpmdConformanceRunner.run(comm, report = { reported.getOrPut(comm.rank) { mutableListOf() } += it }, options = options, scratch = scratch, cases = cases)
            }
        }
        for (r in 0 until n) {
            results[r].map { it.case to it.status } shouldBe listOf(
                "aborts" to CaseResult.Status.Passed, "after it" to CaseResult.Status.Passed, "after it too" to CaseResult.Status.Passed)
            val note = reported[r]!!.single { it.case == "(the shared communicator)" }
            note.status shouldBe CaseResult.Status.Failed
            note.message!! shouldContain "case 'aborts' left it aborted; the cases after it run on a fresh communicator"
            val comms = used[r]!!
            comms[1] shouldBe comms[2]
            (comms[0] === comms[1]) shouldBe false
            shouldThrowAny { comms[1].barrier() }.message!! shouldContain "closed"
        }
    }

    test("JUnit XML escapes markup and control characters and records failures and skips") {
        val file = Files.createTempFile("junit", ".xml")
        writeJUnitXml(file, "suite <&>", listOf(
            CaseResult("a \"case\"", 0, 2, CaseResult.Status.Failed, "line 1 <bad> & \u0001\nline 2", 12),
            CaseResult("b", 1, 2, CaseResult.Status.Skipped, "why"),
            CaseResult("c", 1, 2, CaseResult.Status.Passed),
        ))
        val doc = DocumentBuilderFactory.newInstance().newDocumentBuilder().parse(file.toFile())
        doc.documentElement.getAttribute("name") shouldBe "suite <&>"
        doc.documentElement.getAttribute("failures") shouldBe "1"
        doc.documentElement.getAttribute("skipped") shouldBe "1"
        val failure = doc.getElementsByTagName("failure").item(0)
        failure.attributes.getNamedItem("message").nodeValue shouldBe "line 1 <bad> & \\u0001"
        failure.textContent shouldContain "line 2"
        doc.getElementsByTagName("testcase").item(0).attributes.getNamedItem("name").nodeValue shouldBe "a \"case\" [rank 0 of 2]"
    }
})
