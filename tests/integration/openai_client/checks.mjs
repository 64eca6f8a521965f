// Calls a pdspark router through the unmodified official `openai` npm client and prints what
// came back, as one JSON object on stdout; tests/integration/openai_client_test.py judges it.
//   node checks.mjs BASE_URL PROMPT_IDS_JSON SCHEMA_JSON
import OpenAI from "openai";

const [baseURL, promptIds, schemaJson] = process.argv.slice(2);
const prompt = JSON.parse(promptIds);
const schema = JSON.parse(schemaJson);
const client = new OpenAI({ baseURL, apiKey: "not-checked", maxRetries: 0 });
const out = {};

// Completions with the 3 most likely tokens at every position (vLLM's ignore_eos passes through
// the client's body untouched).
const completion = await client.completions.create({
  model: "m", prompt, max_tokens: 12, temperature: 0, logprobs: 3, ignore_eos: true,
});
out.completion = { text: completion.choices[0].text, logprobs: completion.choices[0].logprobs };

// What evaluation harnesses send for a loglikelihood: the prompt echoed with its logprobs.
const echoed = await client.completions.create({
  model: "m", prompt, max_tokens: 1, temperature: 0, logprobs: 1, echo: true,
});
out.echo = { text: echoed.choices[0].text, logprobs: echoed.choices[0].logprobs };

// Chat, whole and streamed.
const chat = {
  model: "m", messages: [{ role: "user", content: "Who are you?" }], max_tokens: 12,
  temperature: 0, logprobs: true, top_logprobs: 2, ignore_eos: true,
};
const whole = await client.chat.completions.create(chat);
out.chat = { content: whole.choices[0].message.content, logprobs: whole.choices[0].logprobs.content };
const stream = await client.chat.completions.create({ ...chat, stream: true });
const streamed = { content: "", logprobs: [] };
for await (const chunk of stream) {
  const choice = chunk.choices[0];
  if (!choice) continue;
  streamed.content += choice.delta?.content ?? "";
  if (choice.logprobs?.content) streamed.logprobs.push(...choice.logprobs.content);
}
out.chat_stream = streamed;

// Penalties (vLLM's repetition_penalty passes through the body), greedy and on a fixed seed.
const penalised = {
  model: "m", prompt, max_tokens: 24, ignore_eos: true, frequency_penalty: 1.0,
  presence_penalty: 0.5, repetition_penalty: 1.2,
};
const text = async (body) => (await client.completions.create(body)).choices[0].text;
out.penalties = {
  greedy: await text({ ...penalised, temperature: 0 }),
  sampled: await text({ ...penalised, temperature: 0.8, seed: 7 }),
  unpenalised_sampled: await text({
    model: "m", prompt, max_tokens: 24, ignore_eos: true, temperature: 0.8, seed: 7,
  }),
};

// Several choices: n on a seed, best_of, a batch of prompts, and n streamed in chat.
const sampled = { model: "m", max_tokens: 10, ignore_eos: true, temperature: 0.9, seed: 11 };
const choices = (r) => r.choices.map((c) => ({ index: c.index, text: c.text }));
out.n = choices(await client.completions.create({ ...sampled, prompt, n: 3 }));
out.best_of = choices(await client.completions.create({ ...sampled, prompt, n: 1, best_of: 3 }));
const batch = await client.completions.create({
  ...sampled, prompt: [prompt, prompt.slice(0, 5)], n: 2,
});
out.batch = { choices: choices(batch), usage: batch.usage };
const chatN = { ...chat, n: 2, temperature: 0.9, seed: 3, logprobs: false, top_logprobs: 0 };
const chatWhole = await client.chat.completions.create(chatN);
const chatStreamed = ["", ""];
for await (const chunk of await client.chat.completions.create({ ...chatN, stream: true })) {
  for (const c of chunk.choices) chatStreamed[c.index] += c.delta?.content ?? "";
}
out.chat_n = {
  whole: chatWhole.choices.map((c) => c.message.content), streamed: chatStreamed,
};

// Structured output: OpenAI's response_format (completions too, as vLLM takes it) and vLLM's
// guided_choice, both passed through the client's body.
const format = { type: "json_schema", json_schema: { name: "reply", schema, strict: true } };
const structured = { model: "m", prompt, max_tokens: 120, temperature: 0 };
const finished = async (body) => {
  const c = (await client.completions.create(body)).choices[0];
  return { text: c.text, finish_reason: c.finish_reason };
};
const chatReply = await client.chat.completions.create({
  model: "m", messages: [{ role: "user", content: "Reply in JSON." }], max_tokens: 120,
  temperature: 0.7, seed: 5, response_format: format,
});
out.structured = {
  schema: await finished({ ...structured, response_format: format }),
  chat: chatReply.choices[0].message.content,
  choice: await finished({ ...structured, temperature: 1.0, seed: 2,
                           guided_choice: ["alpha", "beta gamma"] }),
  regex: await finished({ ...structured, temperature: 1.0, seed: 3,
                          guided_regex: "[A-Z]{2}-\\d{3}( [a-z]+){0,2}" }),
};

// A forced tool choice: a named function's arguments, and "required"'s list of calls, held to
// the tools' parameter schemas by structured output.
const tools = [
  { type: "function", function: { name: "get_weather", parameters: {
    type: "object", properties: { city: { enum: ["Paris", "Rome"] } }, required: ["city"],
    additionalProperties: false } } },
  { type: "function", function: { name: "get_time", parameters: {
    type: "object", properties: { utc: { type: "boolean" } }, required: ["utc"],
    additionalProperties: false } } },
];
const forced = async (toolChoice) => {
  const r = await client.chat.completions.create({
    model: "m", messages: [{ role: "user", content: "Weather?" }], tools, tool_choice: toolChoice,
    parallel_tool_calls: false, max_tokens: 200, temperature: 0,
  });
  const c = r.choices[0];
  return {
    finish_reason: c.finish_reason, content: c.message.content,
    calls: (c.message.tool_calls ?? []).map((t) => ({
      id: t.id, name: t.function.name, arguments: JSON.parse(t.function.arguments),
    })),
  };
};
const streamedCalls = [];
for await (const chunk of await client.chat.completions.create({
  model: "m", messages: [{ role: "user", content: "Weather?" }], tools, tool_choice: "required",
  parallel_tool_calls: false, max_tokens: 200, temperature: 0, stream: true,
})) {
  for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
    streamedCalls[d.index] ??= { name: "", arguments: "" };
    streamedCalls[d.index].name += d.function?.name ?? "";
    streamedCalls[d.index].arguments += d.function?.arguments ?? "";
  }
}
out.forced_tools = {
  named: await forced({ type: "function", function: { name: "get_weather" } }),
  required: await forced("required"),
  required_streamed: streamedCalls.map((c) => ({ name: c.name,
                                                 arguments: JSON.parse(c.arguments) })),
};

console.log(JSON.stringify(out));
