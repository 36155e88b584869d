// Java's producer at its defaults on one topic: keyed records (random 16-byte
// keys, 100-byte values), as bench_partitions.py's producer rows, with the
// producer's own metrics of request shapes (issue 27: how many partitions a
// Produce request carries at 10,000 partitions, and how long the broker holds it).
//
//   javac -d <classes> -cp "<kafka classpath>" bench/broker_profile/Produce10k.java
//   java -cp <classes>:<kafka classpath> Produce10k <bootstrap> <topic> <records> [rounds] [key=value ...]
//
// (<kafka classpath>: kio.testing.kafka_broker.kafka_classpath()). Prints one JSON
// line per round; the metrics are the producer's cumulative
// ones after that round (a fresh producer per round, so a round's own).
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class Produce10k {
    static final String[] METRICS = {"request-rate", "request-total", "request-latency-avg",
        "request-latency-max", "batch-size-avg", "records-per-request-avg", "record-queue-time-avg",
        "requests-in-flight", "produce-throttle-time-avg", "record-send-total", "bufferpool-wait-time-ns-total",
        "request-size-avg", "request-size-max"};

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int n = Integer.parseInt(args[2]);
        int rounds = args.length > 3 ? Integer.parseInt(args[3]) : 1;
        Random rnd = new Random(1);
        List<byte[]> keys = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            byte[] k = new byte[16];
            rnd.nextBytes(k);
            keys.add(k);
        }
        byte[] value = new byte[100];
        java.util.Arrays.fill(value, (byte) 'x');
        var threads = ManagementFactory.getThreadMXBean();
        var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        for (int r = 0; r < rounds; r++) {
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            for (int i = 4; i < args.length; i++) {
                String[] kv = args[i].split("=", 2);
                props.put(kv[0], kv[1]);
            }
            try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props, new ByteArraySerializer(),
                    new ByteArraySerializer())) {
                p.partitionsFor(topic);
                long cpu0 = os.getProcessCpuTime();
                long t0 = System.nanoTime();
                for (byte[] k : keys)
                    p.send(new ProducerRecord<>(topic, k, value));
                p.flush();
                long secs = System.nanoTime() - t0;
                long cpu = os.getProcessCpuTime() - cpu0;
                StringBuilder out = new StringBuilder();
                out.append(String.format("{\"round\": %d, \"records_per_s\": %.0f, \"cpu_us_per_record\": %.2f, \"secs\": %.3f",
                        r + 1, n / (secs / 1e9), cpu / 1e3 / n, secs / 1e9));
                for (Map.Entry<MetricName, ? extends Metric> e : p.metrics().entrySet()) {
                    MetricName m = e.getKey();
                    if (!m.group().equals("producer-metrics")) continue;
                    for (String want : METRICS)
                        if (m.name().equals(want))
                            out.append(String.format(", \"%s\": %s", want, e.getValue().metricValue()));
                }
                System.out.println(out.append("}"));
            }
        }
    }
}
