// vapeval: evaluates a ValidatingAdmissionPolicy's CEL against one request, as the API server's
// cel-go does, for tests without a control plane. Every input is dynamically typed (the API
// server types pods and workloads by their schema; this checks syntax, macros and behaviour).
// The `quantity` library is not loaded: policies using it are not evaluated here.
//
// stdin: {"policy": <VAP>, "request": {...}, "object": {...}, "oldObject": {...} | null}
// stdout: {"matched": bool, "denied": [messages], "error": "..."}
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
)

type item struct {
	Name              string `json:"name"`
	Expression        string `json:"expression"`
	Message           string `json:"message"`
	MessageExpression string `json:"messageExpression"`
}

type input struct {
	Policy struct {
		Spec struct {
			MatchConditions []item `json:"matchConditions"`
			Variables       []item `json:"variables"`
			Validations     []item `json:"validations"`
		} `json:"spec"`
	} `json:"policy"`
	Request   map[string]any `json:"request"`
	Object    any            `json:"object"`
	OldObject any            `json:"oldObject"`
}

func main() {
	var in input
	out := map[string]any{"matched": false, "denied": []string{}}
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(out) }()
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		out["error"] = err.Error()
		return
	}
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("variables", cel.DynType),
		cel.Variable("params", cel.DynType), cel.Variable("namespaceObject", cel.DynType),
		ext.Strings(),
	)
	if err != nil {
		out["error"] = err.Error()
		return
	}
	variables := map[string]any{}
	vars := map[string]any{
		"object": in.Object, "oldObject": in.OldObject, "request": in.Request,
		"variables": variables, "params": nil, "namespaceObject": map[string]any{},
	}
	eval := func(expr string) (ref.Val, error) {
		ast, iss := env.Compile(expr)
		if iss != nil && iss.Err() != nil {
			return nil, fmt.Errorf("compile %q: %w", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			return nil, err
		}
		val, _, err := prg.Eval(vars)
		if err != nil {
			return nil, fmt.Errorf("eval %q: %w", expr, err)
		}
		return val, nil
	}
	for _, m := range in.Policy.Spec.MatchConditions {
		val, err := eval(m.Expression)
		if err != nil {
			out["error"] = err.Error()
			return
		}
		if val.Value() != true {
			return
		}
	}
	out["matched"] = true
	for _, v := range in.Policy.Spec.Variables {
		val, err := eval(v.Expression)
		if err != nil {
			out["error"] = err.Error()
			return
		}
		variables[v.Name] = val
	}
	denied := []string{}
	for _, v := range in.Policy.Spec.Validations {
		val, err := eval(v.Expression)
		if err != nil {
			out["error"] = err.Error()
			return
		}
		if val.Value() == true {
			continue
		}
		message := v.Message
		if v.MessageExpression != "" {
			msg, err := eval(v.MessageExpression)
			if err != nil {
				out["error"] = err.Error()
				return
			}
			message = fmt.Sprint(msg.Value())
		}
		denied = append(denied, message)
	}
	out["denied"] = denied
}
