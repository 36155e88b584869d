// The Java client's rows of bench/bench_partitions.py and bench/bench_latency.py.
// bench/_java.py compiles this file with the machine's javac against the
// kafka-clients jar kio.testing fetches (no build tool) and runs it as a child
// JVM; each mode prints one JSON line (the last line of its stdout) that the
// Python bench parses.
//
//   produce <bootstrap> <topic> <n> [<rounds>]
//   consume-assign <bootstrap> <topic> <n> <partitions> [<rounds>]
//   consume-group <bootstrap> <topic> <n> [<rounds>]
//   latency-produce <bootstrap> <topic> <rate> <total> <linger0: 0|1>
//   latency-consume <bootstrap> <topic> <total> <seconds> <latencies file>
//   pace <rate> <total>
//
// CPU is OperatingSystemMXBean.getProcessCpuTime(): the whole JVM, every
// thread (the client's I/O thread, the JIT compilers, the GC), as getrusage is
// for the Python clients' processes. Only deltas over the measured interval
// are reported, so the JVM's start-up is not in them. With <rounds> > 1 the
// workload runs that many times in the one JVM (a new producer or consumer
// each time) and the last round is reported: the JIT has compiled the hot
// paths by then, as in a long-running application.
import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Random;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KioBench {
    static final long TIMEOUT_NS = 300_000_000_000L;     // bench_partitions' TIMEOUT
    static final com.sun.management.OperatingSystemMXBean OS =
        (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    static long sink;                                     // touched values go here, so the JIT keeps the reads
    static final List<String> earlier = new ArrayList<>(); // CPU µs/record of the unreported rounds

    static String earlierUs() {
        return "[" + String.join(", ", earlier) + "]";
    }

    static long cpuNs() {
        return OS.getProcessCpuTime();
    }

    // Wall clock in µs since the epoch: what bench_latency's stamp() writes
    // (time.time_ns() // 1000); both read CLOCK_REALTIME.
    static long stampUs() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1000;
    }

    // This JVM's own peak RSS (VmHWM), in MB: ru_maxrss of an exec'd child
    // keeps its parent's high-water mark, the kernel's VmHWM does not.
    static double peakRssMb() throws Exception {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status")))
            if (line.startsWith("VmHWM:"))
                return Long.parseLong(line.split("\\s+")[1]) / 1024.0;
        return -1;
    }

    // Time the JIT compiler threads spent compiling and the collectors spent
    // collecting, ms since the JVM started: their deltas say how much of a
    // fresh JVM's CPU went to warming up rather than to the client.
    static long jitMs() {
        return ManagementFactory.getCompilationMXBean().getTotalCompilationTime();
    }

    static long gcMs() {
        long ms = 0;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans())
            ms += Math.max(0, gc.getCollectionTime());
        return ms;
    }

    static String collectors() {
        List<String> names = new ArrayList<>();
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans())
            names.add(gc.getName());
        return String.join(", ", names);
    }

    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        return p;
    }

    static Properties consumerProps(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");            // as every consumer row of the benches
        return p;
    }

    // records/s, CPU µs/record and seconds of n records over [t0, t1] with cpu0..cpu1
    static String figures(String prefix, long n, long t0, long t1, long cpu0, long cpu1) {
        double secs = (t1 - t0) / 1e9;
        return String.format("\"%srate\": %.1f, \"%sus\": %.4f, \"%ssecs\": %.4f", prefix, n / secs, prefix,
                             (cpu1 - cpu0) / 1e3 / n, prefix, secs);
    }

    static void produce(String bootstrap, String topic, int n, int rounds) throws Exception {
        for (int round = 1; round < rounds; round++)
            produceOnce(bootstrap, topic, n, false);
        produceOnce(bootstrap, topic, n, true);
    }

    static void produceOnce(String bootstrap, String topic, int n, boolean report) throws Exception {
        // the keys before the measurement, as the Python rows make theirs
        Random rnd = new Random(1);
        byte[][] keys = new byte[n][16];
        for (byte[] k : keys)
            rnd.nextBytes(k);
        byte[] value = new byte[100];
        java.util.Arrays.fill(value, (byte) 'x');
        AtomicLong errors = new AtomicLong();
        Callback counted = (metadata, e) -> {
            if (e != null)
                errors.incrementAndGet();
        };
        // at its defaults (4.x: acks=all, idempotence, linger.ms 5): nothing set
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps(bootstrap))) {
            producer.partitionsFor(topic);                // metadata before, as kio's partitions_for
            long jit0 = jitMs(), gc0 = gcMs();
            long cpu0 = cpuNs(), t0 = System.nanoTime();
            for (byte[] k : keys)
                producer.send(new ProducerRecord<>(topic, k, value), counted);
            producer.flush();
            long t1 = System.nanoTime(), cpu1 = cpuNs();
            if (!report) {
                earlier.add(String.format("%.2f", (cpu1 - cpu0) / 1e3 / n));
                return;
            }
            System.out.printf("{\"mode\": \"produce\", \"records\": %d, \"errors\": %d, %s, \"rss_mb\": %.1f, "
                              + "\"jit_ms\": %d, \"gc_ms\": %d, \"earlier_us\": %s, \"gc\": \"%s\"}%n", n,
                              errors.get(), figures("", n, t0, t1, cpu0, cpu1), peakRssMb(), jitMs() - jit0,
                              gcMs() - gc0, earlierUs(), collectors());
        }
    }

    static void consume(String bootstrap, String topic, int n, int partitions, boolean group, int rounds)
            throws Exception {
        // A consumer made and closed before the measurement loads the
        // consumer's classes (no request is sent before a poll): the Python
        // rows import their client before theirs.
        new KafkaConsumer<byte[], byte[]>(consumerProps(bootstrap)).close();
        for (int round = 1; round < rounds; round++)
            consumeOnce(bootstrap, topic, n, partitions, group, false);
        consumeOnce(bootstrap, topic, n, partitions, group, true);
    }

    static void consumeOnce(String bootstrap, String topic, int n, int partitions, boolean group, boolean report)
            throws Exception {
        Properties props = consumerProps(bootstrap);
        if (group) {
            props.put("group.id", "bench-" + UUID.randomUUID().toString().substring(0, 8));
            props.put("auto.offset.reset", "earliest");
        }
        long jit0 = jitMs(), gc0 = gcMs();
        long cpu0 = cpuNs(), t0 = System.nanoTime();
        long cpuFirst = 0, tFirst = 0, got = 0;
        // as the Python rows: from making the consumer to the last record in hand
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            if (group) {
                consumer.subscribe(List.of(topic));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                for (int p = 0; p < partitions; p++)
                    tps.add(new TopicPartition(topic, p));
                consumer.assign(tps);
                for (TopicPartition tp : tps)
                    consumer.seek(tp, 0);
            }
            while (got < n && System.nanoTime() - t0 < TIMEOUT_NS) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofSeconds(1));
                if (!records.isEmpty() && tFirst == 0) {
                    cpuFirst = cpuNs();
                    tFirst = System.nanoTime();
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    sink += r.value().length;             // every value touched
                    got++;
                }
            }
            long t1 = System.nanoTime(), cpu1 = cpuNs();
            if (got < n)
                throw new IllegalStateException("only " + got + " of " + n + " records after "
                                                + (t1 - t0) / 1_000_000_000 + " s");
            if (!report) {
                earlier.add(String.format("%.2f", (cpu1 - cpu0) / 1e3 / n));
                return;
            }
            System.out.printf("{\"mode\": \"%s\", \"records\": %d, %s, %s, \"rss_mb\": %.1f, \"jit_ms\": %d, "
                              + "\"gc_ms\": %d, \"earlier_us\": %s, \"gc\": \"%s\"}%n",
                              group ? "consume-group" : "consume-assign", got,
                              figures("", n, t0, t1, cpu0, cpu1), figures("first_", n, tFirst, t1, cpuFirst, cpu1),
                              peakRssMb(), jitMs() - jit0, gcMs() - gc0, earlierUs(), collectors());
        }
    }

    interface Send {
        void send() throws Exception;
    }

    // bench_latency's paced(): send() `total` times at `rate` per second,
    // catching up after a late wake-up; between sends it parks until the
    // next send is due (no busy polling).
    static void paced(Send send, int rate, long total) throws Exception {
        long t0 = System.nanoTime();
        long i = 0;
        while (i < total) {
            long due = Math.min(total, (System.nanoTime() - t0) * rate / 1_000_000_000L + 1);
            for (; i < due; i++)
                send.send();
            long ahead = t0 + i * 1_000_000_000L / rate - System.nanoTime();
            if (ahead > 0)
                LockSupport.parkNanos(ahead);
        }
    }

    static final byte[] PAD = new byte[92];
    static {
        java.util.Arrays.fill(PAD, (byte) 'x');
    }

    // bench_latency's value(): the send time (8 bytes, big-endian µs) + 92 bytes
    static byte[] value() {
        return ByteBuffer.allocate(100).putLong(stampUs()).put(PAD).array();
    }

    static void pace(int rate, long total) throws Exception {
        long cpu0 = cpuNs();
        paced(() -> sink += value()[7], rate, total);
        System.out.printf("{\"mode\": \"pace\", \"cpu\": %.6f}%n", (cpuNs() - cpu0) / 1e9);
    }

    static void latencyProduce(String bootstrap, String topic, int rate, long total, boolean linger0)
            throws Exception {
        Properties props = producerProps(bootstrap);
        if (linger0)
            props.put("linger.ms", "0");
        AtomicLong errors = new AtomicLong();
        Callback counted = (metadata, e) -> {
            if (e != null)
                errors.incrementAndGet();
        };
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.partitionsFor(topic);
            long jit0 = jitMs();
            long cpu0 = cpuNs();
            paced(() -> producer.send(new ProducerRecord<>(topic, 0, null, value()), counted), rate, total);
            producer.flush();
            long cpu1 = cpuNs();
            System.out.printf("{\"mode\": \"latency-produce\", \"records\": %d, \"errors\": %d, \"cpu\": %.6f, "
                              + "\"rss_mb\": %.1f, \"jit_ms\": %d}%n", total, errors.get(), (cpu1 - cpu0) / 1e9,
                              peakRssMb(), jitMs() - jit0);
        }
    }

    // bench_latency's consumers: positioned at the end (offset 0 of the fresh
    // topic) and fetching, it says "ready" and waits for a line on stdin (the
    // producer has started), then takes arrival - send time of each record
    // and the CPU from the first record to the last. The latencies (µs) go to
    // `out` as native-order 64-bit integers: the n latencies, then the n
    // (broker timestamp - send time), for the Python side's percentiles.
    static void latencyConsume(String bootstrap, String topic, int total, double seconds, String out)
            throws Exception {
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        long[] lat = new long[total], toBroker = new long[total];
        int got = 0;
        long cpu0 = 0, cpu1;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps(bootstrap))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seek(tp, 0);
            consumer.poll(Duration.ofMillis(500));       // connected and fetching
            System.out.println("ready");
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in)).readLine();
            while (got < total && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    if (got == 0)
                        cpu0 = cpuNs();
                    long now = stampUs();
                    long sent = ByteBuffer.wrap(r.value(), 0, 8).getLong();
                    if (got < total) {
                        lat[got] = now - sent;
                        toBroker[got] = r.timestamp() * 1000 - sent;
                    }
                    got++;
                }
            }
            cpu1 = cpuNs();
        }
        int kept = Math.min(got, total);
        ByteBuffer buf = ByteBuffer.allocate(16 * kept).order(ByteOrder.nativeOrder());
        for (int i = 0; i < kept; i++)
            buf.putLong(lat[i]);
        for (int i = 0; i < kept; i++)
            buf.putLong(toBroker[i]);
        try (FileOutputStream f = new FileOutputStream(out)) {
            f.write(buf.array());
        }
        System.out.printf("{\"mode\": \"latency-consume\", \"received\": %d, \"cpu\": %.6f, \"rss_mb\": %.1f}%n",
                          got, got > 0 ? (cpu1 - cpu0) / 1e9 : 0.0, peakRssMb());
    }

    static int rounds(String[] a, int i) {
        return a.length > i ? Integer.parseInt(a[i]) : 1;
    }

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "produce" -> produce(a[1], a[2], Integer.parseInt(a[3]), rounds(a, 4));
            case "consume-assign" -> consume(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]), false,
                                             rounds(a, 5));
            case "consume-group" -> consume(a[1], a[2], Integer.parseInt(a[3]), 0, true, rounds(a, 4));
            case "latency-produce" -> latencyProduce(a[1], a[2], Integer.parseInt(a[3]), Long.parseLong(a[4]),
                                                     a[5].equals("1"));
            case "latency-consume" -> latencyConsume(a[1], a[2], Integer.parseInt(a[3]), Double.parseDouble(a[4]),
                                                     a[5]);
            case "pace" -> pace(Integer.parseInt(a[1]), Long.parseLong(a[2]));
            default -> throw new IllegalArgumentException("unknown mode " + a[0]);
        }
        System.out.flush();
    }
}
