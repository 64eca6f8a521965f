// Twenty chat requests held to one JSON schema (response_format json_schema, strict) through
// the unmodified official `openai` npm client; prints their replies as one JSON list on stdout.
// tests/integration/openai_client_test.py validates each and counts DSpark's acceptance.
//   node structured.mjs BASE_URL SCHEMA_JSON
import OpenAI from "openai";

const [baseURL, schemaJson] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "not-checked", maxRetries: 0 });
const format = {
  type: "json_schema", json_schema: { name: "reply", schema: JSON.parse(schemaJson), strict: true },
};
const subjects = ["the sea", "a king", "winter", "the moon", "bread", "a letter", "rain",
                  "the market", "a horse", "music", "a garden", "the war", "friendship", "gold",
                  "the night", "a ship", "fire", "a lie", "spring", "the crown"];
const replies = await Promise.all(subjects.map(async (subject, i) => {
  const r = await client.chat.completions.create({
    model: "m", messages: [{ role: "user", content: `Describe ${subject} in JSON.` }],
    max_tokens: 120, temperature: 0.8, seed: i, response_format: format,
  });
  return { content: r.choices[0].message.content, finish_reason: r.choices[0].finish_reason };
}));
console.log(JSON.stringify(replies));
