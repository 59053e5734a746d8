package dev.tpcomm.bench

import dev.tpcomm.bench.report.CompareReport
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldHaveSize
import io.kotest.matchers.doubles.plusOrMinus
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.nio.file.Files

class CompareReportTest : FunSpec({
    fun row(impl: String, w: Int, b: Long, us: Double, bus: Double = 1.0) = CsvRow(impl, "allreduce", w, b, us, bus, bus)

    val rows = listOf(
        row("tpcomm_local", 4, 8, 1.5), row("c_mpi", 4, 8, 5.0), row("mpi4py", 4, 8, 6.0), row("torch_gloo", 4, 8, 1000.0, 0.0),
        row("tpcomm_local", 4, 1024, 2.0), row("c_mpi", 4, 1024, 9.0),
        row("tpcomm_local", 4, 65536, 10.0, 10.0), row("c_mpi", 4, 65536, 60.0), row("torch_gloo", 4, 65536, 5000.0, 0.02),
        row("tpcomm_local", 4, 1L shl 20, 40.0, 30.0), row("c_mpi", 4, 1L shl 20, 30.0), row("torch_gloo", 4, 1L shl 20, 6000.0, 8.0),
        row("tpcomm_mpi_openmpi", 4, 8, 6.0), row("tpcomm_mpi_openmpi", 4, 65536, 62.0),
        row("mpi4py", 4, 65536, 61.0),
    )
    val report = CompareReport(
        rows,
        mapOf(CompareReport.Key("tpcomm_local", "allreduce", 4, 8) to listOf(1.4, 1.5, 1.7)),
        mapOf((1L shl 20) to 32.0),
        listOf("date: today"),
    )

    test("targets: ratios against the roofline, C MPI, gloo and mpi4py") {
        val t = report.targets().associateBy { it.name }
        t.getValue("local all-reduce, 4 ranks, 1 MiB: time / roofline allreduce4 <= 1.5").met shouldBe true
        t.getValue("local all-reduce faster than C MPI, 4 ranks, 1 KiB..64 MiB").met shouldBe false   // 40 us vs 30 at 1 MiB
        t.getValue("local all-reduce faster than C MPI, 4 ranks, 1 KiB..64 MiB").measured shouldContain "1 MiB"
        t.getValue("local all-reduce busbw >= 5x torch gloo, 4 ranks, 64 KiB and up").met shouldBe false  // 30/8 < 5
        t.getValue("local all-reduce of 8 bytes on 4 ranks < 2 us").met shouldBe true
        t.getValue("tpcomm_mpi_openmpi within 1.05x of C MPI at 64 KiB and above, 4 ranks").met shouldBe true
        t.getValue("tpcomm_mpi_openmpi all-reduce 8 B within 1.5x of C MPI, 4 ranks").met shouldBe true
        t.getValue("tpcomm_mpi_openmpi faster than mpi4py at every size, 4 ranks").met shouldBe false     // 62 vs 61
        t.getValue("local all-reduce, 4 ranks, 64 MiB vs roofline").met shouldBe null
    }

    test("spread is (max - min) / median of the repeats") {
        report.spread(CompareReport.Key("tpcomm_local", "allreduce", 4, 8))!! shouldBe (0.2 plusOrMinus 1e-9)
        report.spread(CompareReport.Key("c_mpi", "allreduce", 4, 8)) shouldBe null
    }

    test("the document has the session, targets, headline, tables and plots") {
        val dir = Files.createTempDirectory("report")
        val plots = report.writePlots(dir)
        plots shouldHaveSize 1
        val md = report.markdown(plots.map { it.first.fileName.toString() to it.second }, listOf("## Notes", "text"))
        for (s in listOf("## Session", "- date: today", "## Targets", "## Headline", "### allreduce, 4 ranks", "![busbw, allreduce, 4 ranks](busbw_allreduce_n4.png)", "## Notes", "scripts/jmh.sh")) {
            md shouldContain s
        }
    }
})
