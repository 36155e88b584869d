// The Java producer's send -> acknowledgement time per record, for comparing
// kio's batching with Java's (tests/test_producer_big_record.py compiles it
// with the machine's javac against the Kafka tools' kafka-clients).
//
// Usage: SendLatency <bootstrap> <topic> <batch.size> <linger.ms> [<name>=<value>...] <case>...
// (further producer settings, e.g. compression.type=lz4), where a case is "<value bytes>" (one record) or "<first>+<second>" (two
// records sent back to back into one batch; the time is the second's).
// Prints one line "<case> <milliseconds>" per case, after a warm-up record
// that connects and fetches metadata (its own time is not printed).
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class SendLatency {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("batch.size", args[2]);
        props.put("linger.ms", args[3]);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        int first = 4;
        for (; first < args.length && args[first].contains("="); first++) {
            String[] kv = args[first].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        String topic = args[1];
        long ts = System.currentTimeMillis();   // one timestamp: every delta is 0, sizes are exact
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.send(new ProducerRecord<>(topic, 0, ts, null, new byte[1])).get();
            for (int i = first; i < args.length; i++) {
                String[] sizes = args[i].split("\\+");
                long start = System.nanoTime();
                Future<RecordMetadata> last = null;
                for (String size : sizes) {
                    if (last != null)
                        start = System.nanoTime();
                    last = producer.send(new ProducerRecord<>(topic, 0, ts, null, new byte[Integer.parseInt(size)]));
                }
                last.get();
                System.out.println(args[i] + " " + (System.nanoTime() - start) / 1_000_000);
            }
        }
    }
}
