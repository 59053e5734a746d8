package dev.tpcomm.java;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.tpcomm.CommConfig;
import dev.tpcomm.DType;
import dev.tpcomm.MessageInfo;
import dev.tpcomm.PointToPoint;
import dev.tpcomm.Tensor;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** sendRecv, gatherObject, scatterObject and sendObject/recvObject from plain Java. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class MoreObjectOperationsTest {
    record Stats(String host, long step) {}

    /** A codec a Java user writes with what the JDK has. */
    static final class StatsCodec implements ObjectCodec<Stats> {
        @Override
        public byte[] encode(Stats s) {
            return (s.host() + "|" + s.step()).getBytes(java.nio.charset.StandardCharsets.UTF_8);
        }

        @Override
        public Stats decode(byte[] b) {
            String[] parts = new String(b, java.nio.charset.StandardCharsets.UTF_8).split("\\|");
            return new Stats(parts[0], Long.parseLong(parts[1]));
        }
    }

    private static List<JavaCommunicator> world(int n) {
        return JavaComm.localWorld(n, CommConfig.builder().timeout(Duration.ofSeconds(30)).build());
    }

    @Test
    void aRingExchangeInOneBatchListedInReverse() throws Exception {
        List<JavaCommunicator> world = world(3);
        try {
            Ranks.run(world, comm -> {
                int n = comm.getWorldSize();
                int next = (comm.getRank() + 1) % n;
                int prev = (comm.getRank() + n - 1) % n;
                Tensor got = Tensor.zeros(DType.Float32, 2);
                List<MessageInfo> infos = comm.sendRecvBlocking(List.of(
                        PointToPoint.recv(got, prev), PointToPoint.send(Tensor.of(new float[] {comm.getRank(), 1f}), next)));
                assertEquals(new MessageInfo(prev, 0, 8), infos.get(0));
                assertArrayEquals(new float[] {prev, 1f}, got.toFloatArray());
                Tensor again = Tensor.zeros(DType.Float32, 2);
                comm.sendRecv(List.of(PointToPoint.send(Tensor.of(new float[] {7f, comm.getRank()}), next, 3),
                        PointToPoint.recv(again, prev, 3))).join();
                assertArrayEquals(new float[] {7f, prev}, again.toFloatArray());
                CompletionException e = assertThrows(CompletionException.class, () -> comm.sendRecv(null).join());
                assertInstanceOf(IllegalArgumentException.class, e.getCause());
                return null;
            });
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    void gatherScatterAndMessagesOfObjects() throws Exception {
        List<JavaCommunicator> world = world(3);
        StatsCodec codec = new StatsCodec();
        try {
            Ranks.run(world, comm -> {
                int r = comm.getRank();
                List<String> names = comm.gatherObjectBlocking("rank-" + "x".repeat(r * 40), 1, String.class);
                if (r == 1) assertEquals(List.of("rank-", "rank-" + "x".repeat(40), "rank-" + "x".repeat(80)), names);
                else assertNull(names);
                List<Stats> all = comm.gatherObject(new Stats("node" + r, r), 0, codec).join();
                if (r == 0) assertEquals(List.of(new Stats("node0", 0), new Stats("node1", 1), new Stats("node2", 2)), all);
                Stats mine = comm.scatterObjectBlocking(r == 2 ? List.of(new Stats("a", 0), new Stats("b", 1), new Stats("c", 2)) : null, 2, codec);
                assertEquals(new Stats(String.valueOf((char) ('a' + r)), r), mine);
                assertEquals("s" + r, comm.scatterObject(r == 0 ? List.of("s0", "s1", "s2") : null, 0, String.class).join());
                if (r == 0) {
                    comm.sendObjectBlocking(new Stats("to1", 9), 1, 5, codec);
                    comm.sendObjectBlocking("hello", 2, 0, String.class);
                } else if (r == 1) {
                    assertEquals(new Stats("to1", 9), comm.recvObjectBlocking(0, 5, codec));
                } else {
                    assertEquals("hello", comm.recvObject(0, 0, String.class).join());
                }
                return null;
            });
        } finally {
            Ranks.closeAll(world);
        }
    }

    @Test
    @SuppressWarnings({"unchecked", "rawtypes"})
    void aScatterWithTheWrongCountFailsEveryRankAndAGenericClassIsRefused() throws Exception {
        List<JavaCommunicator> world = world(2);
        try {
            Ranks.run(world, comm -> {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> comm.scatterObjectBlocking(comm.getRank() == 0 ? List.of("only one") : null, 0, String.class));
                assertTrue(e.getMessage().contains("one value per rank (2), got 1"), e.getMessage());
                IllegalArgumentException generic = assertThrows(IllegalArgumentException.class,
                        () -> comm.gatherObjectBlocking(List.of(1), 0, (Class) List.class));
                assertTrue(generic.getMessage().contains("ObjectCodec"), generic.getMessage());
                // Nothing was left half-done: the communicator still works.
                assertArrayEquals(new float[] {2f}, comm.allReduceBlocking(Tensor.of(new float[] {1f})).toFloatArray());
                return null;
            });
        } finally {
            Ranks.closeAll(world);
        }
    }
}
