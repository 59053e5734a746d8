package dev.tpcomm.coroutines.async

import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.DeviceMesh
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.property.Arb
import io.kotest.property.arbitrary.int
import io.kotest.property.arbitrary.list
import io.kotest.property.checkAll

class DeviceMeshSpec : FunSpec({
    test("a 2 x 2 dp x tp mesh: tp groups are consecutive ranks, dp groups are ranks equal modulo tp") {
        val out = fakeWorld(4) { comm ->
            DeviceMesh(comm, shape = listOf(2, 2), names = listOf("dp", "tp")).use { mesh ->
                val tpSum = mesh["tp"].allReduce(Tensor.of(intArrayOf(comm.rank))).toIntArray()[0]
                val dpSum = mesh["dp"].allReduce(Tensor.of(intArrayOf(comm.rank))).toIntArray()[0]
                listOf(mesh.coordinates, mesh.ranksAlong("tp"), mesh.ranksAlong("dp"), listOf(tpSum, dpSum),
                    listOf(mesh["tp"].rank, mesh.communicator("dp").rank, mesh["tp"].worldSize))
            }
        }
        out[0] shouldBe listOf(listOf(0, 0), listOf(0, 1), listOf(0, 2), listOf(1, 2), listOf(0, 0, 2))
        out[1] shouldBe listOf(listOf(0, 1), listOf(0, 1), listOf(1, 3), listOf(1, 4), listOf(1, 0, 2))
        out[2] shouldBe listOf(listOf(1, 0), listOf(2, 3), listOf(0, 2), listOf(5, 2), listOf(0, 1, 2))
        out[3] shouldBe listOf(listOf(1, 1), listOf(2, 3), listOf(1, 3), listOf(5, 4), listOf(1, 1, 2))
    }

    test("a 2 x 3 mesh over 6 ranks, and a 3-D mesh, give groups of the right sizes and members") {
        val out = fakeWorld(6) { comm ->
            val mesh = DeviceMesh(comm, listOf(2, 3), listOf("dp", "tp"))
            val tp = mesh["tp"].allGather(Tensor.of(intArrayOf(comm.rank))).toIntArray().toList()
            val dp = mesh["dp"].allGather(Tensor.of(intArrayOf(comm.rank))).toIntArray().toList()
            val cube = DeviceMesh(comm, listOf(1, 2, 3), listOf("pp", "dp", "tp"))
            val pp = cube["pp"].allGather(Tensor.of(intArrayOf(comm.rank))).toIntArray().toList()
            Triple(tp to dp, pp, cube.coordinates to cube.size("tp"))
        }
        out[4].first shouldBe (listOf(3, 4, 5) to listOf(1, 4))
        out[2].first shouldBe (listOf(0, 1, 2) to listOf(2, 5))
        out[5].second shouldBe listOf(5)
        out[5].third shouldBe (listOf(0, 1, 2) to 3)
    }

    test("property: for any shape, each dimension's group holds the ranks differing only along it, ranked by that coordinate") {
        checkAll(20, Arb.list(Arb.int(1..3), 1..3)) { shape ->
            val size = shape.fold(1) { a, b -> a * b }
            val names = shape.indices.map { "d$it" }
            fakeWorld(size) { comm ->
                val mesh = DeviceMesh(comm, shape, names)
                mesh.coordinates.foldIndexed(0) { d, acc, c -> acc * shape[d] + c } shouldBe comm.rank
                for ((d, name) in names.withIndex()) {
                    val group = mesh[name].allGather(Tensor.of(intArrayOf(comm.rank))).toIntArray().toList()
                    group shouldBe mesh.ranksAlong(name)
                    mesh[name].rank shouldBe mesh.coordinates[d]
                    mesh[name].worldSize shouldBe shape[d]
                }
            }
        }
    }

    test("close closes the sub-communicators, not the parent") {
        fakeWorld(2) { comm ->
            val mesh = DeviceMesh(comm, listOf(1, 2), listOf("dp", "tp"))
            mesh.toString() shouldContain "dp=1, tp=2"
            mesh.close()
            comm.splits.all { it.closed } shouldBe true
            comm.closed shouldBe false
        }
    }

    test("bad shapes and names fail before any split, saying what to pass") {
        val (c0) = FakeWorld(4).communicators()
        shouldThrow<IllegalArgumentException> { DeviceMesh(c0, listOf(2, 3), listOf("dp", "tp")) }.message shouldContain
            "shape [2, 3] holds 6 ranks but the communicator has 4"
        shouldThrow<IllegalArgumentException> { DeviceMesh(c0, listOf(2, 2), listOf("dp")) }.message shouldContain "one name per dimension"
        shouldThrow<IllegalArgumentException> { DeviceMesh(c0, listOf(2, 2), listOf("dp", "dp")) }.message shouldContain "duplicates"
        shouldThrow<IllegalArgumentException> { DeviceMesh(c0, listOf(4, 0), listOf("dp", "tp")) }.message shouldContain ">= 1"
        shouldThrow<IllegalArgumentException> { DeviceMesh(c0, emptyList(), emptyList()) }
        shouldThrow<IllegalArgumentException> { DeviceMesh(c0, listOf(4), listOf(" ")) }.message shouldContain "blank"
        c0.log shouldBe emptyList()
    }

    test("asking for an unknown dimension names the ones that exist") {
        fakeWorld(2) { comm ->
            val mesh = DeviceMesh(comm, listOf(2), listOf("dp"))
            shouldThrow<IllegalArgumentException> { mesh["tp"] }.message shouldContain "no dimension named 'tp'; the dimensions are [dp]"
            shouldThrow<IllegalArgumentException> { mesh.communicator(1) }
        }
    }
})
