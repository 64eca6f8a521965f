// An agent's conversation through the official openai package, against the router with the
// DeepSeek-V4 reasoning and tool-call parsers (router_scripted_server --agent): a tool call
// parsed from the model's DSML (whole and streamed as argument deltas), the tool's result sent
// back and the final answer, and reasoning content whole and streamed in thinking mode.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.ROUTER_URL, apiKey: "unused", maxRetries: 0 });

function expect(what, got, want) {
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    console.error(`${what}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
    process.exit(1);
  }
  console.log(`${what}: ok`);
}

const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];
const question = { role: "user", content: "What is the weather in Paris?" };

// 1. The model calls the tool.
const first = await client.chat.completions.create({
  model: "tiny", messages: [question], tools, max_tokens: 400,
});
const call = first.choices[0].message.tool_calls?.[0];
expect("finish reason", first.choices[0].finish_reason, "tool_calls");
expect("content before the call", first.choices[0].message.content, "Let me check.");
expect("tool call", { name: call?.function.name, args: JSON.parse(call?.function.arguments ?? "null") },
       { name: "get_weather", args: { city: "Paris" } });

// The same call streamed: argument deltas under one index add up to the whole call's arguments.
let streamedArgs = "";
let streamedName = "";
for await (const chunk of await client.chat.completions.create({
  model: "tiny", messages: [question], tools, max_tokens: 400, stream: true,
})) {
  for (const delta of chunk.choices[0]?.delta?.tool_calls ?? []) {
    streamedName += delta.function?.name ?? "";
    streamedArgs += delta.function?.arguments ?? "";
  }
}
expect("streamed tool call", { name: streamedName, args: streamedArgs },
       { name: "get_weather", args: call.function.arguments });

// 2. The tool's result goes back; the model answers.
const second = await client.chat.completions.create({
  model: "tiny", max_tokens: 400, tools,
  messages: [question, first.choices[0].message,
             { role: "tool", tool_call_id: call.id, content: "sunny, 21 C" }],
});
expect("answer after the tool", second.choices[0].message.content, "It is sunny in Paris.");
expect("answer finish", second.choices[0].finish_reason, "stop");

// 3. Thinking mode: reasoning apart from the answer, whole and streamed.
const thinking = {
  model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 400,
  chat_template_kwargs: { thinking: true },
};
const whole = await client.chat.completions.create(thinking);
expect("reasoning", [whole.choices[0].message.reasoning_content, whole.choices[0].message.content],
       ["The user wants the weather; I have a tool.", "Hello, world!"]);
let reasoning = "";
let content = "";
for await (const chunk of await client.chat.completions.create({ ...thinking, stream: true })) {
  reasoning += chunk.choices[0]?.delta?.reasoning_content ?? "";
  content += chunk.choices[0]?.delta?.content ?? "";
}
expect("streamed reasoning", [reasoning, content],
       ["The user wants the weather; I have a tool.", "Hello, world!"]);
